import { AsyncLocalStorage } from 'node:async_hooks';
import type { Permission, Principal } from '../auth/rbac.js';
import type { AuditedCall, PermissionAudit } from './audit.js';

/**
 * What a call into the application layer is, as the transport that received it names it: the
 * permission audit records it beside each decision without every function taking it as an
 * argument. REST sets it per request, MCP per tool call, the CLI per command.
 */
export interface CallContext extends AuditedCall {
  /**
   * Who the call is authenticated as, with which credential (absent: no one, e.g. a registration,
   * or the CLI): a command the call makes for this user checks the credential again when it
   * appends, in a repository or not (src/app/repositoryFence.ts).
   */
  principal?: Principal;
  /** Where the call's permission decisions are recorded (the service's audit; absent: not recorded). */
  audit?: PermissionAudit;
  /** The permissions the call was allowed, which its commands check again when they append (src/app/repositoryFence.ts). */
  granted?: GrantedPermission[];
}

/**
 * A permission a call was allowed (src/app/access.ts adds it), kept on the call so that its
 * command can check it again when it appends (src/app/repositoryFence.ts).
 */
export interface GrantedPermission {
  principal: Principal;
  domain: string;
  permission: Permission;
}

const storage = new AsyncLocalStorage<CallContext>();

export function withCallContext<T>(call: CallContext, run: () => T): T {
  return storage.run(call, run);
}

export function currentCall(): CallContext | undefined {
  return storage.getStore();
}
