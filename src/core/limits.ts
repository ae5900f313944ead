/**
 * Named limits. Every queue, map, retry loop and message in Basalt has a bound, and it is written here so that it can
 * be found, reasoned about and tuned in one place. Units go last in names.
 */

export const LIMITS = {
  /** Largest key, in UTF-8 bytes. */
  keyBytesMax: 1024,
  /** Largest encoded value. */
  valueBytesMax: 1024 * 1024,
  /** Longest time to live of a written version (`put(..., { ttlMs })`) and of a lease: 365 days. */
  ttlMsMax: 365 * 24 * 3_600_000,
  /** Keys attached to one lease (a keepalive rewrites them all in one transaction). */
  leaseKeysMax: 1_000,
  /** Largest frame on a TCP connection (payload after the length prefix). */
  frameBytesMax: 16 * 1024 * 1024,
  /** Messages queued for one peer while its connection is down; older ones are dropped past this. */
  peerSendQueueMax: 100_000,
  /** Bytes buffered in one outgoing socket before the peer is deemed too slow and its connection is dropped. */
  peerWriteBufferBytesMax: 64 * 1024 * 1024,
  /** Inbound connections one node accepts at a time (handshaking or established). */
  inboundConnectionsMax: 1024,
  /** Longest node name or ephemeral id accepted in a handshake or envelope. */
  identityCharsMax: 256,
  /** Member names of one cluster (each at most identityCharsMax), as a node is configured and says in its hello. */
  clusterMembersMax: 1_024,
  /** Nesting depth of a value accepted by the wire codec (deeper values are malformed). */
  codecDepthMax: 64,
  /** Requests awaiting a response on one node. */
  pendingRequestsMax: 100_000,
  /** Default per-request timeout. */
  requestTimeoutMsDefault: 10_000,
  /** Handshake must complete within this time or the connection is dropped. */
  handshakeTimeoutMs: 5_000,
  /** Reconnect backoff bounds. */
  reconnectBackoffMsMin: 20,
  reconnectBackoffMsMax: 2_000,
  /** Default maximum clock offset tolerated between nodes. */
  maxClockSkewMsDefault: 500,
  /** Messenger: a peer's envelopes refused for its clock (rule 8) are reported at most once per this interval. */
  clockSkewReportIntervalMs: 10_000,
  /** Storage: most rows one scan call returns (callers page with the returned next key). */
  storageScanRowsMax: 10_000,
  /**
   * Storage: most rows one change read looks at, changed or not, so one call over a large idle range is a bounded
   * piece of work (the caller goes on from the returned next key).
   */
  storageChangeRowsExaminedMax: 10_000,
  /** Storage: most GC queue entries one gc() call processes, so one call is a bounded piece of work. */
  storageGcBatchMax: 10_000,
  /** Storage: most tx state records one listing call returns (recovery pages through them). */
  txStateListMax: 10_000,
  /** Storage: a snapshot chunk is cut once its encoded entries reach this many bytes (one entry may exceed it). */
  storageSnapshotChunkBytes: 1024 * 1024,
  /** Storage: largest value of one named per-partition metadata record (`setMeta`), e.g. a replica's lease. */
  storageMetaBytesMax: 64 * 1024,
  /** Storage: longest name of a per-partition metadata record. */
  storageMetaNameCharsMax: 64,
  /** Storage: entries deleted per range step when destroying or restoring a partition. */
  storageRangeDeleteBatch: 10_000,
  /** Entries in one node's volatile tx state map; past it new entries are refused (live state is never evicted). */
  txStateMapEntriesMax: 1_000_000,
  /** Callbacks waiting for tx outcomes on one node's tx state map (all txs together). */
  txFinalWaitersMax: 100_000,
  /** How long a final entry stays in the tx state map after cleanup completed (or after it became final). */
  txStateRetentionMsDefault: 30_000,
  /** Lock requests queued behind one lock key; past it a request fails with TX_LOCK_CONFLICT. */
  lockWaitersPerKeyMax: 1_024,
  /** Distinct lock keys (held or awaited) in one node's lock manager; past it new keys fail with TX_LOCK_CONFLICT. */
  lockKeysMax: 1_000_000,
  /** Raft: a follower campaigns after [1, 2) × this many ticks without hearing from a leader. */
  raftElectionTicks: 10,
  /**
   * Raft: a leader sends heartbeats every this many ticks (100 ms, a fifth of the shortest election timeout, as
   * etcd's defaults); every group heartbeats on its own, so this sets most of an idle node's message rate.
   */
  raftHeartbeatTicks: 2,
  /** Raft driver: real time between two ticks. */
  raftTickIntervalMs: 50,
  /**
   * Raft messages of all groups to one peer that one turn of the event loop carries in one `RaftBatch` message (more
   * go in further batches of the same turn); also the most a received batch may hold.
   */
  raftBatchMessagesMax: 512,
  /**
   * Estimated bytes of entry and snapshot data one `RaftBatch` carries at most (well under frameBytesMax): a message
   * that would take a batch past it goes in the next one, and a message larger than it goes on its own.
   */
  raftBatchBytesMax: 2 * 1024 * 1024,
  /** Raft: unanswered Appends pipelined to one follower in the replicate state. */
  raftInflightAppendsMax: 256,
  /** Raft: entries in one Append message (and the byte bound below; an Append always carries at least one). */
  raftAppendEntriesMax: 512,
  raftAppendBytesMax: 1024 * 1024,
  /** Raft: committed entries handed to the state machine in one Ready. */
  raftApplyEntriesMax: 1024,
  /** Raft: entries a leader holds beyond its commit index; proposals past this are refused as OVERLOADED. */
  raftUncommittedEntriesMax: 10_000,
  /** Raft: voters and learners of one group (its leader tracks each); a change adding one more is refused. */
  raftMembersMax: 64,
  /** Raft driver: proposals of one node awaiting their apply; more are refused as OVERLOADED. */
  raftPendingProposalsMax: 100_000,
  /** Raft driver: applied entries kept in the log before the state machine is asked for a snapshot to compact it. */
  raftCompactEntriesMin: 10_000,
  /**
   * Segmented Raft log: size of one segment file, preallocated with zeros when it is created (a batch larger than
   * this gets a segment of its own size). Old segments are deleted once nothing in them is live.
   */
  raftLogSegmentBytes: 64 * 1024 * 1024,
  /** Segmented Raft log: smallest segment size accepted (tests use small segments to roll over often). */
  raftLogSegmentBytesMin: 4 * 1024,
  /**
   * Segmented Raft log: segments kept before the groups still referring to the oldest ones (idle groups whose hard
   * state or snapshot sits there) have their live state rewritten into the newest, so the old ones can go.
   */
  raftLogSegmentsBeforeRewrite: 2,
  /**
   * Node: a node sends a heartbeat to each connected peer this often (four within the liveness timeout below). On an
   * idle node (every Raft group quiet) heartbeats and their answers are nearly all it sends and wakes for; they also
   * sample the peers' clock offsets.
   */
  nodeHeartbeatIntervalMs: 500,
  /** Node: a peer whose connection was down, or whose heartbeats went unanswered, this long is gone (rule 17). */
  peerLivenessTimeoutMsDefault: 2_000,
  /**
   * Replica: foreign intents without a lock (their writer lost its locks with a primary change) one read-write
   * operation resolves and switches before it fails retryably.
   */
  lostLockResolutionsMax: 16,
  /**
   * Node: clock offset samples kept per peer (the latest heartbeats); the one of smallest round trip is the estimate.
   * With the heartbeat interval this sets how soon a clock step is seen: the window turns over in 1.5 s, within the
   * liveness timeout (a peer whose answers this node refuses for its clock goes gone then, unmeasured).
   */
  clockOffsetSamplesMax: 3,
  /**
   * Node (rule 19): a node whose measured offset from a majority of the live nodes exceeds this fraction of
   * maxClockSkew stops acting as primary and as coordinator until it is back within.
   */
  clockOffsetBoundFraction: 1,
  /** Node: superseded ephemeral ids remembered as gone (one per peer restart); the oldest are forgotten past it. */
  goneNodeIdsMax: 100_000,
  /** Metastorage: tables in the cluster. */
  tablesMax: 10_000,
  /** Metastorage: partitions of one table. */
  tablePartitionsMax: 4_096,
  /** Metastorage: longest table name, in characters. */
  tableNameCharsMax: 256,
  /** Metastorage: apply results kept for local proposers to read back (most recent entries). */
  metaResultsMax: 4_096,
  /** Users of the client protocol one cluster keeps (metastorage). */
  usersMax: 10_000,
  /** Per-table roles of one user. */
  userTableRolesMax: 1_024,
  /** Metastorage: a watch request from a non-member waits at most this long for a newer revision. */
  metaWatchWaitMs: 1_000,
  /** Metastorage: watch requests one member keeps waiting at once. */
  metaWatchersMax: 10_000,
  /** Metastorage: a command is retried (other member, new leader) until this deadline. */
  metaCommandTimeoutMs: 15_000,
  /** Replica: length of a lease (HLC ms). Must exceed 2·maxClockSkew, since a holder stops acting that much early. */
  leaseDurationMsDefault: 5_000,
  /** Replica: the holder proposes a renewal once this little of its acting window is left (stasis not counted). */
  leaseRenewMarginMsDefault: 2_000,
  /**
   * Replica: the leader proposes an idle SafeTimeSync when applied safe time has not moved for this long (Ignite's
   * idleSafeTimePropagationDuration default). Fresh RO reads never wait for it (they go to the primary); each sync is
   * a Raft entry, fsynced on every replica, so a shorter period costs an idle cluster disk and CPU.
   */
  safeTimeSyncIdleMsDefault: 1_000,
  /**
   * Replica: a partition nobody used for this long (no request, proposal or waiting read), with nothing in flight and
   * no lock held, rests: its holder stops renewing the lease and proposing idle SafeTimeSyncs, and its Raft group may
   * go quiet. The first request wakes it (a lapsed lease is renewed while that request waits for it).
   */
  replicaRestAfterMsDefault: 3_000,
  /**
   * Replica host: period of the upkeep timer while every hosted partition rests (it only flushes then; a wake re-arms
   * the short one). Each timer wake of an idle process costs CPU, however little it does.
   */
  replicaRestingUpkeepIntervalMs: 1_000,
  /** Replica: callbacks waiting for one partition's applied safe time to reach a timestamp. */
  safeTimeWaitersMax: 100_000,
  /** Replica: one node's proposals taken (timestamp registered in flight) and not yet applied or abandoned. */
  replicaProposalsInFlightMax: 100_000,
  /** Replica: writes in one UpdateAll command. */
  updateAllWritesMax: 10_000,
  /** Replica: partitions named as enlisted in one FinishTx command. */
  finishEnlistedPartitionsMax: 10_000,
  /** Replica: tx ids in one VacuumTxStates or TxCleanupCompleted command. */
  txStateVacuumBatchMax: 1_000,
  /** Replica handlers: a lock request waits at most this long on a primary, then fails with TX_LOCK_CONFLICT. */
  replicaLockWaitTimeoutMsDefault: 10_000,
  /**
   * Replica handlers: a lock request blocked by an older tx waits this long for it (a patient request, lock-manager.ts)
   * before it dies as wait-die says. An older holder that finishes within it hands its lock straight on, where the
   * younger tx would have died, backed off (txRetryBackoffMsMin and up) and run again; a wait-for cycle costs at most
   * this. 50 ms measured better than 20 ms on the hot-account bench (16 clients on 20 accounts: 0.28 retries per
   * transfer instead of 0.62, p99 310 ms instead of 370 ms).
   */
  replicaLockPatienceMsDefault: 50,
  /**
   * Replica handlers: the patience of a one-phase write's lock request (an implicit put or remove). It takes no lock
   * after its row's and holds its locks for one Raft round, so on a hot key it waits its turn in the queue of older
   * writers rather than dying after the patience above and backing off: 64 clients of 50/50 gets and puts on Zipfian
   * keys measured put p99 0.6 s and no wait-die death with 1 s, against 1.0–1.7 s and about 1,700 deaths in 10 s with
   * 50 ms. Still bounded, so a wait-for cycle through a one-phase write (its partition IX against a scan's S) ends.
   */
  replicaOnePhaseLockPatienceMsDefault: 1_000,
  /** Replica handlers: responses of the most recent RW operations kept per tx, to answer duplicates (rule 7). */
  replicaOpResultsPerTxMax: 8,
  /** Replica handlers: tx records (open, and closed ones kept until their deadline) per hosted partition. */
  replicaTxRecordsMax: 100_000,
  /** Replica: txs whose writes a primary answered before they applied, awaiting confirmation; past it it answers after. */
  replicaPipelinedTxsMax: 10_000,
  /** Replica handlers: an RO read waits at most this long for safe time to cover its readTs, then fails TIMEOUT. */
  replicaReadWaitMsDefault: 5_000,
  /**
   * Replica handlers: a holder whose applied lease starts within this long waits for the start (rule 1) instead of
   * answering PRIMARY_MISS (a new lease starts at the previous one's expiration, up to a lease duration away).
   */
  replicaLeaseStartWaitMsMax: 4_000,
  /**
   * Commit partition primary: cleanup rounds (send, re-resolve primaries, back off) each target partition of one
   * cleanup run is sent in (a target a later caller added gets as many); a run that ends unfinished leaves its record
   * "cleanup not completed" for the rescan, which starts a new run.
   */
  cleanupAttemptsMax: 30,
  /** Commit partition primary: backoff between cleanup rounds, doubling from min to max. */
  cleanupBackoffMsMin: 20,
  cleanupBackoffMsMax: 2_000,
  /**
   * Enlisted primary: write-intent switches of distinct txs one WriteIntentSwitchAll command carries (the cleanups that
   * arrived while the partition's previous switch was being replicated; any more wait for the next command).
   */
  intentSwitchBatchMax: 256,
  /**
   * Partition primary with `batchWrites`: data writes of distinct txs one UpdateBatch command carries (the writes
   * proposed within one turn of the event loop; any more go into further commands). Their writes together stay
   * within updateAllWritesMax, as one UpdateAll's.
   */
  updateBatchItemsMax: 64,
  /**
   * Commit partition primary: a TxCleanupCompleted command is proposed this long after the first cleanup that completed
   * while none was pending, so that the txs finishing cleanup in that window share one Raft entry.
   */
  cleanupCompletedGatherMs: 500,
  /** Commit partition primary: timeout of one TxCleanupRequest. */
  cleanupRequestTimeoutMs: 5_000,
  /** Commit partition primary: cleanup runs in progress at once; past it a run is not started (the rescan retries). */
  finishesInFlightMax: 100_000,
  /** Commit partition primary: period of the rescan of records whose cleanup has not completed. */
  cleanupRescanIntervalMs: 10_000,
  /** Commit partition primary: cleanup runs one rescan pass starts per commit partition (it resumes there next pass). */
  cleanupRescanBatchMax: 1_000,
  /**
   * Enlisted primary: in-line cleanups of finished lock holders one lock request may run before it takes the
   * wait-die decision as it stands.
   */
  inlineCleanupsPerLockMax: 4,
  /**
   * Enlisted primary: a lock request that waits settles the key's holders again this often (a holder may finish
   * while it waits, and its cleanup may be slow to come), at most `inlineRechecksPerWaitMax` times per wait.
   */
  inlineRecheckIntervalMs: 1_000,
  inlineRechecksPerWaitMax: 10,
  /**
   * Enlisted primary: a request wait-die denied waits at most this long for the in-line cleanup of the older holder
   * before it dies anyway (the cleanup goes on in the background).
   */
  inlineSettleWaitMsMax: 1_000,
  /** Enlisted primary: one holder state request to a commit partition: attempts (following PRIMARY_MISS), timeout. */
  holderStateRequestAttemptsMax: 2,
  holderStateRequestTimeoutMs: 1_000,
  /** Enlisted primary: holder txs whose state this node is asking their commit partition about at once. */
  holderStateRequestsMax: 10_000,
  /** Default tx timeout; a tx's hard deadline is beginTs + this (rule 15), the same on every node of a cluster. */
  txTimeoutMsDefault: 30_000,
  /**
   * Largest timeout a tx may ask for at begin (`begin({ timeoutMs })`: a batch job, an interactive session). Its
   * deadline travels in its id, so every node derives the same one; its durable record is vacuumed only after it.
   */
  txTimeoutMsMax: 600_000,
  /** Coordinator: attempts of a tx's first request to a partition (and of a one-phase write), following PRIMARY_MISS. */
  txEnlistAttemptsMax: 8,
  /** Coordinator: timeout of one RW operation request; above the primary's lock wait, so that a lock wait ends first. */
  txOpRequestTimeoutMsDefault: 15_000,
  /** Coordinator: timeout of one TxFinishRequest or LeaseConfirmRequest. */
  txFinishRequestTimeoutMs: 10_000,
  /** Coordinator: finish attempts before commit reports TX_OUTCOME_UNKNOWN (retries then go on in the background). */
  txFinishAttemptsMax: 8,
  /** Coordinator: finish attempts in all, foreground and background, after which the coordinator stops retrying. */
  txFinishAttemptsTotalMax: 10_000,
  /** Coordinator: backoff between retries of one request (enlistment, finish), doubling from min to max. */
  txRetryBackoffMsMin: 20,
  txRetryBackoffMsMax: 1_000,
  /** Watch: the longest pause between rounds that found no change. */
  watchPollMsMax: 60_000,
  /** Watch: partitions read at once by one watch (one page each in memory). */
  watchConcurrencyMax: 64,
  /**
   * Watch: consecutive retryable failures of one page (same window, same position) before the stream fails; with the
   * backoff below, about two minutes without any node answering.
   */
  watchRetriesMax: 120,
  watchRetryBackoffMsMax: 1_000,
  /** Coordinator: backoff cap of the background finish retries. */
  txBackgroundBackoffMsMax: 5_000,
  /** Coordinator: a state request for a FINISHING tx with commitTs ≤ readTs waits this long for the outcome. */
  txStateWaitMsDefault: 3_000,
  /** Coordinator: keys of one getAll, entries of one putAll. */
  txBatchKeysMax: 10_000,
  /** runTransaction: retries of a transaction that failed with a retryable error. */
  txRunRetriesDefault: 10,
  /** Resolution: a write intent resolution gives up (TIMEOUT) after this long, retries included. */
  resolutionTimeoutMsDefault: 10_000,
  /** Resolution: timeout of one state request (coordinator, commit partition, primary replica, recovery). */
  resolutionRequestTimeoutMs: 3_000,
  /** Resolution: backoff between commit partition attempts, doubling from min to max. */
  resolutionBackoffMsMin: 10,
  resolutionBackoffMsMax: 500,
  /** Resolution: resolutions in flight on one node (shared ones count once); more are refused OVERLOADED. */
  resolutionsInFlightMax: 100_000,
  /** Resolution: local write intent switches queued on one node; more are skipped (the Raft cleanup does it). */
  intentSwitchesQueuedMax: 100_000,
  /** Resolution: attempts of one request to a partition primary that follow PRIMARY_MISS hints. */
  primaryRequestAttemptsMax: 8,
  /** Orphan detection: a tx's recovery request is not sent again within this interval. */
  orphanRecoveryIntervalMs: 5_000,
  /** Orphan detection: txs remembered with the time of their last recovery request. */
  orphanRecoveriesTrackedMax: 100_000,
  /** Commit partition: recoveries (abort through the compare-and-set) in progress at once. */
  recoveriesInFlightMax: 10_000,
  /** RO tx: an open read-only transaction is closed after this long (its readTs then stops holding back GC). */
  txReadOnlyTimeoutMsDefault: 600_000,
  /** RO tx: largest bounded staleness accepted (readTs = now − staleness). */
  txReadOnlyStalenessMsMax: 600_000,
  /** RO tx: open read-only transactions on one node (each holds the node's low watermark at or below its readTs). */
  txReadOnlyOpenMax: 100_000,
  /** RO tx: timeout of one ReadOnlyRequest (above the replica's read wait, so that a wait for safe time ends first). */
  txReadOnlyRequestTimeoutMsDefault: 10_000,
  /** RO tx: attempts of one read (local replica, then the primary, following PRIMARY_MISS hints and retrying). */
  txReadOnlyAttemptsMax: 8,
  /**
   * Low watermark: MVCC history newer than now − this is kept. Above txReadOnlyTimeoutMsDefault + the largest
   * staleness + maxClockSkew, an RO tx coordinated on another node never finds its readTs below this node's watermark.
   */
  lowWatermarkRetentionMsDefault: 1_260_000,
  /** Protected timestamps the cluster holds at once (metastorage); more are refused. */
  protectedTimestampsMax: 64,
  /** A protected timestamp expires at most this long after the command that created or renewed it. */
  protectedTimestampLifetimeMaxMs: 600_000,
  /** A protected timestamp's lifetime as the client asks for it; its holder renews it every third of this. */
  protectedTimestampLifetimeMsDefault: 120_000,
  /** Storage GC driver: one round over every hosted partition this often (sooner while work remains). */
  storageGcIntervalMsDefault: 1_000,
  /** Storage GC driver: queued rows one partition's gc() call processes in one round. */
  storageGcRowsPerRoundMax: 1_000,
  /** Vacuum driver: rounds of tx state vacuum (volatile map, durable records on commit partition primaries). */
  txStateVacuumIntervalMsDefault: 1_000,
  /** Vacuum driver: durable tx state records examined on one commit partition per round. */
  txStateVacuumScanMax: 10_000,
  /** Tx sweep: one pass over the node's non-final map entries (and what it holds of their txs) this often. */
  txStateSweepIntervalMs: 1_000,
  /** Tx sweep: map entries examined in one pass (a cursor resumes there next pass). */
  txStateSweepScanMax: 10_000,
  /**
   * Tx sweep: a non-final entry of a tx this node holds nothing of is removed once now > D + maxClockSkew + this
   * (D the tx's deadline): by then no RW request of the tx is served anywhere (rule 15), and any later message about
   * it rebuilds what it needs (the coordinator id is in the tx id).
   */
  txStateSweepGraceMs: 30_000,
  /**
   * Tx sweep: leftovers (locks, intents) of a tx whose coordinator is alive are recovered only once now > D +
   * maxClockSkew + this. Above the coordinator's foreground finish window (txFinishAttemptsMax ×
   * txFinishRequestTimeoutMs plus backoffs), so a commit its user still waits for is never aborted under it.
   */
  txSweepRecoveryAfterDeadlineMs: 120_000,
  /** Tx sweep: txs with intents listed per primary partition in one pass (those the map has no entry of). */
  txSweepIntentTxsPerPartitionMax: 1_000,
  /** Tx sweep: recovery requests one pass asks the orphan detector to send (each still rate-limited per tx). */
  txSweepRecoveriesPerPassMax: 1_000,
  /** Client protocol: connections one node's client server accepts at a time. */
  clientConnectionsMax: 1_024,
  /** Failed logins per (source address, user) answered without a delay; past it each failure doubles the wait. */
  authFailuresFree: 3,
  /** The first wait after the free failures; it doubles with every failure up to authDelayMsMax. */
  authDelayMsBase: 250,
  authDelayMsMax: 60_000,
  /** A (source address, user) whose last failure is older than this starts again from no failures. */
  authFailuresForgetMs: 15 * 60_000,
  /** (source address, user) pairs with failed logins remembered at most (the oldest are forgotten first). */
  authFailureEntriesMax: 10_000,
  /** Client protocol: open transactions (handles) of one client connection; a begin past it is OVERLOADED. */
  clientTxHandlesMax: 1_024,
  /** Client protocol: requests of one connection being processed; past it the server stops reading that socket. */
  clientRequestsInFlightMax: 256,
  /** Client protocol: calls one remote client awaits at once; more fail OVERLOADED without being sent. */
  clientPendingCallsMax: 100_000,
  /**
   * Client protocol: default timeout of one remote call. Above the coordinator's own bounds (an operation's request
   * timeout, a commit's finish attempts), so that the node answers first and a client TIMEOUT means a lost node.
   */
  clientRequestTimeoutMsDefault: 60_000,
  /** Backup: partitions read (and files written) at once by one backup (default). */
  backupPartitionsInFlightDefault: 4,
  /** Backup: rows per page of a backup's partition scans. */
  backupScanPageRows: 1_000,
  /** Backup: backups in one chain (a full backup and its incrementals), checked when a chain is read. */
  backupChainLengthMax: 1_000,
  /** Restore: rows written by one restore transaction (fewer when they reach restoreBatchBytesMax). */
  restoreBatchRowsMax: 500,
  /** Restore: encoded bytes of the rows of one restore transaction. */
  restoreBatchBytesMax: 1_048_576,
  /** Simulator: events run in one simulation before it is declared runaway. */
  simEventsMax: 50_000_000,
} as const;
