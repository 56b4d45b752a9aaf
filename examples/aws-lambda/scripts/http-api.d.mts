/** A local stand-in for an API Gateway HTTP API (payload format 2.0) in front of a Lambda handler: see the .mjs file. */
export interface HttpApiServer {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  close(): Promise<void>;
}
export interface HttpApiOptions {
  /** @default 0 (a free port) */
  port?: number;
  /** The JWT authorizer's stand-in: the bearer token → `claims.sub`, or undefined for 401. */
  authorize: (token: string) => string | undefined;
  /** The function timeout. @default 30000 */
  timeoutMs?: number;
}
export function serveHttpApi(
  handler: (event: never, context: { getRemainingTimeInMillis(): number; awsRequestId: string }) => Promise<unknown>,
  options: HttpApiOptions,
): Promise<HttpApiServer>;
