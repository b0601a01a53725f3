import { AsyncLocalStorage } from 'node:async_hooks';
import type { Principal } from '../auth/rbac.js';
import type { PermissionAudit } from './audit.js';
import type { GrantedPermission } from './repositoryFence.js';

/**
 * What a call into the application layer is, as the transport that received it names it: the
 * permission audit records it beside each decision without every function taking it as an
 * argument. REST sets it per request, MCP per tool call, the CLI per command.
 */
export interface CallContext {
  transport: 'rest' | 'mcp' | 'cli' | 'web';
  /** `GET /api/v1/repositories/:repoID/facts`, `tool searchFacts`, `projections rebuild`. */
  operation: string;
  /**
   * Who the call is authenticated as, with which credential (absent: no one, e.g. a registration,
   * or the CLI): a command the call makes for this user checks the credential again when it
   * appends, in a repository or not (src/app/repositoryFence.ts).
   */
  principal?: Principal;
  clientAddress?: string;
  /** The HTTP request id (also the correlation id of the events the call appends). */
  requestId?: string;
  /** Where the call's permission decisions are recorded (the service's audit; absent: not recorded). */
  audit?: PermissionAudit;
  /** The permissions the call was allowed, which its commands check again when they append (src/app/repositoryFence.ts). */
  granted?: GrantedPermission[];
}

const storage = new AsyncLocalStorage<CallContext>();

export function withCallContext<T>(call: CallContext, run: () => T): T {
  return storage.run(call, run);
}

export function currentCall(): CallContext | undefined {
  return storage.getStore();
}
