/**
 * Where protocol code counts what happened (recoveries, lease changes, resolutions by path): a sink the node's
 * metrics implement (node/basalt-node.ts NodeCounters), declared here, at the bottom, so that every layer can take
 * one without importing the node. Counter names are constants beside the code that bumps them.
 */
export interface CounterSink {
  add(name: string, n?: number): void;
}

/** A sink that counts nothing (a component run without metrics, e.g. in a unit test). */
export const NO_COUNTERS: CounterSink = { add: () => {} };
