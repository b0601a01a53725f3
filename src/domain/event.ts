/**
 * The domain-only view of an event (type + data) that deciders produce and consume. The store
 * wraps it in its envelope (`src/eventstore/envelope.ts`: identity, order, metadata); the
 * domain knows nothing of that envelope.
 */
export interface DomainEvent<Type extends string = string, Data = Record<string, unknown>> {
  type: Type;
  data: Data;
}
