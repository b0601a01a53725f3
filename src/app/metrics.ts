import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Prometheus metrics of one process, served at `/metrics`. */
export function createMetrics(sources: {
  projectionStatus: () => Promise<{ name: string; lag: number; position: number }[]>;
  jobCounts: () => Promise<Record<string, Record<string, number>>>;
  /** On the distributed tier: events of the log the relay has not published to Kafka yet. */
  relayLag?: () => Promise<number>;
}) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const httpRequests = new Counter({
    name: 'factlog_http_requests_total',
    help: 'HTTP requests answered, by method, route and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const httpDuration = new Histogram({
    name: 'factlog_http_request_duration_seconds',
    help: 'HTTP request duration',
    labelNames: ['method', 'route'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const appends = new Counter({
    name: 'factlog_eventstore_appends_total',
    help: 'Appends to the event store, by outcome',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const appendedEvents = new Counter({
    name: 'factlog_eventstore_events_appended_total',
    help: 'Events appended, by type',
    labelNames: ['type'] as const,
    registers: [registry],
  });
  new Gauge({
    name: 'factlog_projection_lag_events',
    help: 'Events each projection still owes: from its checkpoint to the log head, or on the Kafka tier those not yet published plus those its consumer group has not acknowledged',
    labelNames: ['projection'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const status of await sources.projectionStatus()) this.set({ projection: status.name }, status.lag);
    },
  });
  new Gauge({
    name: 'factlog_stage_queue_depth',
    help: 'Jobs per stage and state',
    labelNames: ['kind', 'state'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const [kind, states] of Object.entries(await sources.jobCounts())) {
        for (const [state, count] of Object.entries(states)) this.set({ kind, state }, count);
      }
    },
  });
  const { relayLag } = sources;
  if (relayLag) {
    new Gauge({
      name: 'factlog_relay_lag_events',
      help: 'Events of the log the relay has not published to Kafka yet (the log head minus bus_relay_positions)',
      registers: [registry],
      async collect() {
        this.set(await relayLag());
      },
    });
  }
  return { registry, httpRequests, httpDuration, appends, appendedEvents };
}

export type Metrics = ReturnType<typeof createMetrics>;
