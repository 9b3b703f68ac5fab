// The pages, in menu order. A page module exports `render(root, params)` and may return
// `{ onLive(snapshot), dispose() }`. Workflows, schedules and ASH slot in here as entries
// whose modules call their `/v1` routes (the proxy forwards every `/v1` path).
// `scope`: the page is listed only for keys holding it.

import * as overview from "./pages/overview.js";
import * as queues from "./pages/queues.js";
import * as jobs from "./pages/jobs.js";
import * as job from "./pages/job.js";
import * as dead from "./pages/dead.js";
import * as enqueue from "./pages/enqueue.js";
import * as keys from "./pages/keys.js";
import * as workflows from "./pages/workflows.js";
import * as workflow from "./pages/workflow.js";
import * as schedules from "./pages/schedules.js";
import * as http from "./pages/http.js";
import * as webhooks from "./pages/webhooks.js";
import * as monitors from "./pages/monitors.js";

export const pages = [
  { id: "overview", title: "Overview", module: overview },
  { id: "queues", title: "Queues", module: queues },
  { id: "jobs", title: "Jobs", module: jobs },
  { id: "dead", title: "Dead letters", module: dead },
  { id: "workflows", title: "Workflows", module: workflows },
  { id: "schedules", title: "Schedules", module: schedules },
  { id: "http", title: "HTTP jobs", module: http },
  { id: "webhooks", title: "Webhooks", module: webhooks },
  { id: "monitors", title: "Monitors", module: monitors },
  { id: "enqueue", title: "Enqueue", module: enqueue, scope: "produce" },
  { id: "keys", title: "Keys & audit", module: keys, scope: "admin" },
  // Not in the menu: reached from lists.
  { id: "job", title: "Job", module: job, hidden: true },
  { id: "workflow", title: "Workflow", module: workflow, hidden: true },
];
