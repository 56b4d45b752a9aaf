import type { Awaitable } from '@mrtr/core';

/** A protected header this codec accepts, with what decryption needs from it. */
export interface JweHeader {
  /** The key id named in the header. */
  readonly kid: string;
  /** The header segment exactly as it appears in the token (base64url of the header JSON). */
  readonly segment: string;
  /** AAD per RFC 7516 §5.1 step 14: the ASCII bytes of `segment`. */
  readonly aad: Uint8Array;
}

/** The decoded segments of a compact JWE whose header has passed the strict checks. */
export interface JweParts {
  /** The whole token (jose re-parses it). */
  readonly token: string;
  readonly header: JweHeader;
  /** 12 bytes. */
  readonly iv: Uint8Array;
  readonly ciphertext: Uint8Array;
  /** 16 bytes. */
  readonly tag: Uint8Array;
}

/**
 * The cryptography behind the codec: AES-256-GCM with a direct key (`alg: "dir"`, `enc: "A256GCM"`).
 * The Node build uses synchronous `node:crypto`; the default build (other runtimes) uses jose on WebCrypto.
 * The build picks one by swapping `./impl.js` (see tsup.config.ts).
 */
export interface JweEngine<K> {
  readonly name: 'node' | 'web';
  /** Turns the 32-byte content encryption key into whatever `encrypt`/`decrypt` use. */
  importKey(cek: Uint8Array): Awaitable<K>;
  /** The compact JWE of `plaintext` (UTF-8) under `header`, with a fresh 96-bit IV. */
  encrypt(key: K, header: JweHeader, plaintext: string): Awaitable<string>;
  /**
   * The plaintext as text. Throws `StateIntegrityError` when the tag does not verify and
   * `StateMalformedError` when the plaintext is not UTF-8.
   */
  decrypt(key: K, parts: JweParts): Awaitable<string>;
}
