// Boot, sign-in, theme and the hash router (#/page?filters): a page's state lives in its
// URL, so views can be bookmarked and shared.

import { h, clear, toast } from "./dom.js";
import { session, call, ApiError, can } from "./api.js";
import * as live from "./live.js";
import { pages } from "./nav.js";

const $ = (id) => document.getElementById(id);
let current = null; // { dispose, onLive }
let unsubscribe = null;

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  $("theme").textContent = theme === "dark" ? "Light theme" : "Dark theme";
}

function initTheme() {
  const saved = localStorage.getItem("pgferry-theme");
  const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  applyTheme(saved || (dark ? "dark" : "light"));
  $("theme").addEventListener("click", () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    localStorage.setItem("pgferry-theme", next);
    applyTheme(next);
    window.dispatchEvent(new Event("resize"));
  });
}

export function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean);
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  return { id: parts[0] || "overview", arg: parts[1], params };
}

function showSignIn(message) {
  live.stop();
  session.identity = null; session.csrf = null;
  if (current && current.dispose) current.dispose();
  current = null;
  clear($("page"));
  $("nav").hidden = true; $("who").hidden = true; $("signout").hidden = true; $("live").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("api-key").focus();
}

function buildNav() {
  const nav = clear($("nav"));
  for (const p of pages) {
    if (p.hidden || (p.scope && !can(p.scope))) continue;
    nav.append(h("a", { href: `#/${p.id}`, "data-page": p.id }, p.title));
  }
  nav.hidden = false;
}

function markNav(id) {
  const active = { job: "jobs", workflow: "workflows" }[id] || id;
  for (const a of $("nav").querySelectorAll("a")) {
    if (a.dataset.page === active) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function route() {
  if (!session.identity) return;
  const { id, arg, params } = parseHash();
  const page = pages.find((p) => p.id === id && (!p.scope || can(p.scope))) || pages[0];
  if (current && current.dispose) current.dispose();
  current = null;
  const root = clear($("page"));
  clear($("toasts")); // a page's notices do not follow the user to the next page
  markNav(page.id);
  document.title = `${page.title} · pgferry`;
  try {
    current = (await page.module.render(root, { arg, params })) || null;
  } catch (e) {
    root.append(h("p", { class: "error", role: "alert" }, e instanceof ApiError ? e.describe() : String(e)));
  }
  const snap = live.latest();
  if (snap && current && current.onLive) current.onLive(snap);
}

function started(data) {
  session.identity = data.identity;
  session.csrf = data.csrf_token;
  $("signin").hidden = true;
  const who = $("who");
  who.textContent = `${data.identity.tenant} · ${data.identity.scopes.join(", ")}`;
  who.hidden = false;
  $("signout").hidden = false;
  buildNav();
  live.start(() => showSignIn("Your session ended; sign in again."));
  if (unsubscribe) unsubscribe();
  unsubscribe = live.subscribe((snap) => { if (current && current.onLive) current.onLive(snap); });
  route();
}

async function signIn(ev) {
  ev.preventDefault();
  const key = $("api-key").value.trim();
  $("signin-error").textContent = "";
  if (!key) { $("signin-error").textContent = "Enter an API key."; return; }
  try {
    const data = await call("POST", "session", { api_key: key });
    $("api-key").value = "";
    // The browser drops a Secure cookie on plain HTTP off loopback: say so plainly.
    try { await call("GET", "session"); } catch {
      $("signin-error").textContent = "Signed in, but the browser did not keep the session cookie: open the dashboard over HTTPS (or on localhost).";
      return;
    }
    started(data);
  } catch (e) {
    $("signin-error").textContent = e instanceof ApiError ? e.message : String(e);
  }
}

async function signOut() {
  try { await call("DELETE", "session"); } catch { /* already gone */ }
  showSignIn("Signed out.");
}

async function boot() {
  initTheme();
  $("signin-form").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  window.addEventListener("pgferry:signed-out", () => { if (session.identity) showSignIn("Your session ended; sign in again."); });
  try {
    started(await call("GET", "session"));
  } catch {
    showSignIn();
  }
}

window.addEventListener("unhandledrejection", (e) => {
  const err = e.reason;
  toast(err instanceof ApiError ? err.describe() : String(err), true);
});

boot();
