// Calls to the dashboard's endpoints. `/ui/api/v1/...` is the JSON API itself (the server
// answers it as the signed-in key); every state-changing call carries the CSRF token.

export const session = { identity: null, csrf: null };

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || "error";
    this.field = e.field || null;
  }
  // "field: message" in the API's words.
  describe() {
    return this.field ? `${this.field}: ${this.message}` : this.message;
  }
}

export async function call(method, path, body) {
  const headers = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET" && session.csrf) headers["x-csrf-token"] = session.csrf;
  const res = await fetch(`/ui/api/${path}`, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401 && path !== "session") window.dispatchEvent(new CustomEvent("pgferry:signed-out"));
    throw err;
  }
  return data;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, body === undefined ? {} : body);
export const patch = (path, body) => call("PATCH", path, body);
export const del = (path) => call("DELETE", path);

// Query string from an object, skipping empty values.
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") u.set(k, v);
  const s = u.toString();
  return s ? `?${s}` : "";
}

export function can(scope) {
  const s = (session.identity && session.identity.scopes) || [];
  return s.includes(scope) || s.includes("admin");
}
