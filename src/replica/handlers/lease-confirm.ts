/**
 * LeaseConfirmRequest (rule 6): before committing, the coordinator asks a primary whose lease may end before commitTs
 * whether it still acts under the enlisted token. The primary absorbs commitTs first (so every later write here gets
 * a larger timestamp) and says yes only if it still acts under that very token, with commitTs below the expiration.
 */
import type { LeaseConfirmRequest, LeaseConfirmResponse } from '../../tx/core/messages.js';
import type { PartitionReplica } from '../partition/partition-replica.js';

export function handleLeaseConfirm(p: PartitionReplica, request: LeaseConfirmRequest): LeaseConfirmResponse {
  const confirmation = p.confirmLease(request.token, request.commitTs);
  return { kind: 'LeaseConfirmResponse', confirmed: confirmation.confirmed };
}
