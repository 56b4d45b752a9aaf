/// <reference path="./cluster-key-slot.d.ts" />
import calculateSlot from 'cluster-key-slot';

/**
 * The Redis Cluster hash slot of a key (CRC16/XMODEM of its UTF-8 bytes, with the `{hash tag}` rule), as
 * ioredis computes it to route a command: `cluster-key-slot`, the package ioredis itself uses.
 */
export function hashSlot(key: string): number {
  return calculateSlot(key);
}
