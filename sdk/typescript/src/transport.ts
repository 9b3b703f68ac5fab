// gRPC plumbing shared by the client and the worker: the service definitions (from the
// descriptor compiled at build time), channels with keepalive, auth metadata, and the
// reconnect backoff.
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { descriptor } from "./gen/descriptor.js";

const definitions = protoLoader.fromJSON(descriptor as never, {
  keepCase: true,
  // Job ids and Unix milliseconds fit a double exactly (< 2^53).
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
});

export interface Method {
  path: string;
  serialize: (value: unknown) => Buffer;
  deserialize: (bytes: Buffer) => unknown;
}

export function method(service: "Producer" | "Worker" | "Admin" | "WorkflowWorker" | "WorkflowAdmin", name: string): Method {
  const svc = definitions[`pgferry.v1.${service}`] as grpc.ServiceDefinition | undefined;
  const m = svc?.[name];
  if (!m) throw new Error(`pgferry: no method ${service}.${name} in the protocol descriptor`);
  return {
    path: m.path,
    serialize: m.requestSerialize as (value: unknown) => Buffer,
    deserialize: m.responseDeserialize as (bytes: Buffer) => unknown,
  };
}

// Keepalive so a dead server (or a silently dropped connection) is noticed in seconds, and
// message limits large enough for a full EnqueueBatch.
const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  "grpc.keepalive_time_ms": 20_000,
  "grpc.keepalive_timeout_ms": 10_000,
  "grpc.keepalive_permit_without_calls": 1,
  "grpc.http2.max_pings_without_data": 0,
  "grpc.max_send_message_length": 64 * 1024 * 1024,
  "grpc.max_receive_message_length": 64 * 1024 * 1024,
  "grpc.initial_reconnect_backoff_ms": 100,
  "grpc.max_reconnect_backoff_ms": 2_000,
};

/** "host:port" and whether to use TLS, from "http://host:port", "https://host" or "host:port". */
export function parseTarget(url: string): { target: string; secure: boolean } {
  if (!url.includes("://")) return { target: url, secure: false };
  const u = new URL(url);
  const scheme = u.protocol.replace(/:$/, "");
  if (!["http", "https", "grpc", "grpcs"].includes(scheme)) {
    throw new TypeError(`pgferry: unsupported URL scheme "${scheme}" in "${url}"`);
  }
  const secure = scheme === "https" || scheme === "grpcs";
  const port = u.port || (secure ? "443" : "80");
  return { target: `${u.hostname || "127.0.0.1"}:${port}`, secure };
}

export function openChannel(url: string): grpc.Client {
  const { target, secure } = parseTarget(url);
  const creds = secure ? grpc.credentials.createSsl() : grpc.credentials.createInsecure();
  return new grpc.Client(target, creds, CHANNEL_OPTIONS);
}

export function authMetadata(apiKey: string, extra?: Record<string, string>): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${apiKey}`);
  if (extra) for (const [k, v] of Object.entries(extra)) md.set(k, v);
  return md;
}

/** Exponential backoff with jitter: delay n is uniform in [c/2, c], c = min(cap, base·2^n),
 * so a fleet of workers reconnecting after a server restart does not arrive at once. */
export class Backoff {
  private attempt = 0;
  constructor(
    readonly baseMs = 100,
    readonly capMs = 10_000,
  ) {}
  next(): number {
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }
  reset(): void {
    this.attempt = 0;
  }
}

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
