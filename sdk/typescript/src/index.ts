export { Pgferry, register, type PgferryOptions, type TaskWorkerOptions, type WorkflowWorkerRunOptions } from "./pgferry.js";
export { Workflow, Machine, type WorkflowDefinition, type WorkflowOf, type Registrable } from "./wf-define.js";
export { WorkflowContext, StepFailed, ChildFailed, NONDETERMINISM, type StepOptions, type WorkflowRef } from "./wf-code.js";
export { WorkflowAdmin, WorkflowHandle, WorkflowFailedError, NonDeterminismError, type Started, type SignalSent, type SignalTarget } from "./wf-admin.js";
export { HttpWorkflowWorker, type HttpWorkflowWorkerOptions, type HttpWorkflowWorkerStats } from "./wf-http-worker.js";
export { WorkflowWorker, type WorkflowWorkerOptions, type WorkflowWorkerStats, type StepRunner } from "./wf-worker.js";
export {
  Step,
  type StepOutcome,
  type ClaimedStep,
  type ChildSpec,
  type ChildEnd,
  type SignalRecord,
  type KindCaps,
  type MachineDefinition,
  type StepHandler,
  type StartOptions,
  type WorkflowInfo,
  type WorkflowSummary,
  type WorkflowStepRecord,
} from "./wf-types.js";
export { Client, type ClientOptions, type RetryPolicy, type WaitOptions } from "./client.js";
export { Worker, type WorkerOptions, type WorkerStats, type Handler, type HandlerOptions, type Logger } from "./worker.js";
export { JobContext } from "./context.js";
export { Schedules, type ScheduleOptions, type ScheduleSpec, type ScheduleInfo, type Ensured } from "./schedules.js";
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
export { enqueueTx, startWorkflowTx, type SqlClient, type TxJob, type TxWorkflowStart } from "./tx.js";
