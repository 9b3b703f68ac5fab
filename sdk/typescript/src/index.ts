export { Pgferry, register, type PgferryOptions, type TaskWorkerOptions } from "./pgferry.js";
export { Client, type ClientOptions, type RetryPolicy, type WaitOptions } from "./client.js";
export { Worker, type WorkerOptions, type WorkerStats, type Handler, type HandlerOptions, type Logger } from "./worker.js";
export { JobContext } from "./context.js";
export { Task, type TaskDefinition, type TaskOf, validate } from "./task.js";
export type { StandardSchemaV1 } from "./standard-schema.js";
export { Snooze, Cancel, Fail, JobAborted, Outcome, type FailOptions } from "./outcomes.js";
export {
  PgferryError,
  AuthError,
  PermissionDenied,
  NotFound,
  InvalidArgument,
  PayloadTooLarge,
  Conflict,
  RateLimited,
  Unavailable,
  Unimplemented,
  ProtocolError,
  ValidationError,
  JobFailedError,
} from "./errors.js";
export type {
  AttemptInfo,
  CancelJobsResult,
  DeadFilter,
  Durability,
  EnqueueOptions,
  EnqueuedJob,
  JobInfo,
  JobRequest,
  JobState,
  Json,
  ListJobsOptions,
  Page,
  QueueCounts,
  QueueInfo,
  QueueSettings,
} from "./types.js";
