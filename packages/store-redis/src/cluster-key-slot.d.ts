// cluster-key-slot (the hash ioredis routes Cluster commands with) ships no types.
declare module 'cluster-key-slot' {
  /** The Redis Cluster hash slot (0–16383) of a key, with the `{hash tag}` rule. */
  function calculateSlot(key: string | Buffer): number;
  export default calculateSlot;
}
