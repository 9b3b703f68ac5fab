// The protocol messages as @grpc/proto-loader decodes them (keepCase, longs as numbers,
// defaults filled, oneofs named by their virtual field). Only what the SDK reads and writes.
// The contract is proto/pgferry/v1/*.proto; docs/protocol.md explains it.

export interface WireJobSpec {
  queue: string;
  kind: string;
  args: string;
  meta?: Record<string, string>;
  priority?: number;
  max_attempts?: number;
  run_at_unix_ms?: number;
  delay_ms?: number;
  unique_key?: string;
}

export interface WireError {
  code: string;
  message: string;
  field: string;
}

export interface AttemptRef {
  id: number;
  attempt: number;
  token: string;
}

export interface HelloAck {
  tenant: string;
  server_version: string;
  max_batch: number;
  max_payload_bytes: number;
}

export interface EnqueueAck {
  seq: number;
  job_ids: number[];
  duplicates: boolean[];
  error?: WireError | null;
  replayed?: boolean;
}

export interface ProducerResponse {
  msg?: "hello_ack" | "ack";
  hello_ack?: HelloAck;
  ack?: EnqueueAck;
}

export interface WireJob {
  ref: AttemptRef;
  queue: string;
  kind: string;
  args: string;
  meta: Record<string, string>;
  max_attempts: number;
  priority: number;
  enqueued_at_unix_ms: number;
  lease_until_unix_ms: number;
  /** Microseconds; 0 from servers that predate it. */
  enqueued_at_unix_us: number;
}

export interface ResultAck {
  ref: AttemptRef;
  stale: boolean;
  error?: WireError | null;
}

export interface WorkerHelloAck {
  tenant: string;
  server_version: string;
  default_lease_ms: number;
  max_batch: number;
}

export interface HeartbeatAck {
  lease_until_unix_ms: number;
  lost: AttemptRef[];
}

export interface WorkerResponse {
  msg?:
    | "hello_ack"
    | "job"
    | "result_ack"
    | "cancel"
    | "heartbeat_ack"
    | "drained"
    | "jobs"
    | "result_acks";
  hello_ack?: WorkerHelloAck;
  job?: WireJob;
  result_ack?: ResultAck;
  cancel?: { ref: AttemptRef };
  heartbeat_ack?: HeartbeatAck;
  drained?: Record<string, never>;
  jobs?: { jobs: WireJob[] };
  result_acks?: { acks: ResultAck[] };
}

export type WireOutcome =
  | { ok: { result: string } }
  | {
      error: {
        message: string;
        kind: string;
        retryable: boolean;
        retry_delay_ms?: number;
      };
    }
  | { snooze: { delay_ms: number } }
  | { cancelled: { message: string } };

export type WireJobResult = { ref: AttemptRef; duration_ms: number } & WireOutcome;

export interface WireAttemptInfo {
  attempt: number;
  outcome: string;
  error: string;
  error_kind: string;
  claimed_at_unix_ms: number;
  finished_at_unix_ms: number;
  duration_ms: number;
  worker: string;
}

export interface WireJobInfo {
  id: number;
  queue: string;
  kind: string;
  state: string;
  args: string;
  meta: Record<string, string>;
  priority: number;
  max_attempts: number;
  enqueued_at_unix_ms: number;
  run_at_unix_ms?: number;
  attempts: WireAttemptInfo[];
  result: string;
  unique_key?: string;
}

export interface WireQueueSettings {
  concurrency?: number;
  max_attempts?: number;
  backoff_base_ms?: number;
  backoff_cap_ms?: number;
  lease_ms?: number;
  retention_ms?: number;
  aging_ms?: number;
  durability?: string;
}

export interface WireQueueInfo {
  name: string;
  paused: boolean;
  settings: WireQueueSettings | null;
  counts: Record<string, number> | null;
  durability: string;
}
