// The runstate console: one page that reads demo-runner serve's JSON API
// and follows its server-sent events. Plain JavaScript, no build step and
// no dependency: the page is served from the binary and works offline.
// Everything shown is built with DOM calls (never innerHTML), so run data
// cannot inject markup. The token, when the server needs one, lives in
// this tab's sessionStorage and goes out only in the Authorization header.
"use strict";

const STATUSES = ["queued", "running", "waiting", "success", "failed", "denied", "timeout", "canceled", "interrupted"];
const TERMINAL = new Set(["success", "failed", "denied", "timeout", "canceled", "interrupted"]);
const TOKEN_KEY = "runstate-console-token";
const API = "../"; // the API is served beside /ui/, also behind a path prefix

let me = null;            // GET /whoami: {credentials, principal, role}
let view = null;          // the AbortController of the current view's requests and streams

// ---- small helpers -------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function statusBadge(status) {
  return h("span", { class: "status s-" + status }, status);
}

const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });

function relative(iso) {
  const secs = (new Date(iso).getTime() - Date.now()) / 1000;
  const abs = Math.abs(secs);
  if (abs < 5) return "just now";
  if (abs < 60) return rtf.format(Math.round(secs), "second");
  if (abs < 3600) return rtf.format(Math.round(secs / 60), "minute");
  if (abs < 86400) return rtf.format(Math.round(secs / 3600), "hour");
  return rtf.format(Math.round(secs / 86400), "day");
}

// when shows a time relative to now, its exact value in the title and in
// the machine-readable datetime; refreshTimes keeps the words current.
function when(iso) {
  if (!iso) return h("span", { class: "note" }, "—");
  return h("time", { datetime: iso, title: new Date(iso).toLocaleString(), "data-rel": "" }, relative(iso));
}

function refreshTimes() {
  for (const t of document.querySelectorAll("time[data-rel]")) t.textContent = relative(t.getAttribute("datetime"));
}

function duration(from, to) {
  if (!from || !to) return "";
  const ms = new Date(to) - new Date(from);
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms / 60000) + " min";
}

function announce(text) {
  const el = document.getElementById("announce");
  el.textContent = "";
  setTimeout(() => { el.textContent = text; }, 50);
}

function showError(text) {
  const el = document.getElementById("error");
  el.hidden = !text;
  el.textContent = text || "";
}

function setLive(on, text) {
  const el = document.getElementById("live");
  el.classList.toggle("on", on);
  el.textContent = text;
}

// ---- the API -------------------------------------------------------------

class Problem extends Error {
  constructor(p) {
    super(p.detail || p.title);
    this.problem = p;
  }
}

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

// api calls the JSON API; a refusal throws a Problem with the server's
// problem JSON, whose detail is the store's own message.
async function api(path, options = {}) {
  const res = await fetch(API + path, {
    ...options,
    headers: { ...authHeaders(), ...(options.headers || {}) },
    signal: options.signal || (view && view.signal),
  });
  const type = res.headers.get("Content-Type") || "";
  const body = type.includes("json") ? await res.json() : await res.text();
  if (!res.ok) {
    const p = typeof body === "object" ? body : { status: res.status, title: res.statusText, detail: String(body) };
    if (res.status === 401) signIn(p.detail);
    throw new Problem(p);
  }
  return body;
}

function refusal(err) {
  if (err instanceof Problem) {
    const p = err.problem;
    return "Refused (" + (p.code || p.status) + "): " + (p.detail || p.title);
  }
  return "The server did not answer: " + err.message;
}

// follow reads a server-sent event stream with fetch (EventSource cannot
// send the Authorization header) and calls onEvent(name, data) for each
// event. It reconnects after a failure; each new connection starts with
// the current state, so a client misses nothing it needs: delivery is at
// least once and the store stays the truth.
async function follow(path, signal, onEvent) {
  while (!signal.aborted) {
    try {
      const res = await fetch(API + path, { headers: authHeaders(), signal });
      if (res.status === 401) { signIn(); return; }
      if (!res.ok) throw new Problem(await res.json());
      // The server says how it follows the store: its change stream, or
      // polling alone.
      const how = res.headers.get("Runstate-Live");
      setLive(true, how ? "live, " + how : "live");
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          let name = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) name = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (data) onEvent(name, JSON.parse(data));
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof Problem) showError(refusal(err));
    }
    setLive(false, "reconnecting…");
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// ---- sign-in -------------------------------------------------------------

function signIn(why) {
  if (view) view.abort();
  view = new AbortController();
  setLive(false, "signed out");
  const main = document.getElementById("main");
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const form = h("form", { class: "signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title", tabindex: "-1" }, "Sign in"),
    h("p", {}, "This server needs a token from its tokens file. A reader's token shows runs; an operator's token also cancels, signals and retries them."),
    why ? h("p", { class: "note" }, why) : null,
    h("label", { for: "token" }, "Token"), input,
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    me = null;
    route();
  });
  main.replaceChildren(form);
  input.focus();
}

async function whoami() {
  if (!me) me = await api("whoami");
  const who = document.getElementById("who");
  who.textContent = me.credentials ? me.principal + " (" + me.role + ")" : "no credentials (loopback)";
  document.getElementById("signout").hidden = !me.credentials;
  return me;
}

function canAct() {
  return me && me.role === "operator";
}

// ---- operator actions ----------------------------------------------------

// confirmAction asks before an action in a modal dialog and resolves to
// the reason typed (cancel), "" (others) or null when the operator backs out.
function confirmAction({ title, text, withReason, okLabel }) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-reason-row").hidden = !withReason;
  const reason = document.getElementById("confirm-reason");
  reason.value = "";
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    const form = document.getElementById("confirm-form");
    const back = document.getElementById("confirm-back");
    const done = (v) => {
      form.removeEventListener("submit", onSubmit);
      back.removeEventListener("click", onBack);
      dialog.removeEventListener("cancel", onBack);
      dialog.close();
      resolve(v);
    };
    const onSubmit = (e) => { e.preventDefault(); done(reason.value.trim()); };
    const onBack = (e) => { e.preventDefault(); done(null); };
    form.addEventListener("submit", onSubmit);
    back.addEventListener("click", onBack);
    dialog.addEventListener("cancel", onBack);
    dialog.showModal();
    (withReason ? reason : document.getElementById("confirm-ok")).focus();
  });
}

async function act(run, action) {
  const asks = {
    cancel: { title: "Cancel run?", text: "Run " + run.run_id + " (" + run.workflow_name + ") ends as canceled, with the steps it is executing.", withReason: true, okLabel: "Cancel run" },
    signal: { title: "Signal run?", text: "Run " + run.run_id + " resumes after its wait step.", okLabel: "Signal run" },
    retry: { title: "Retry run?", text: "A new run of " + run.workflow_name + " is queued, retrying " + run.run_id + ".", okLabel: "Queue retry" },
  }[action];
  const reason = await confirmAction(asks);
  if (reason === null) return;
  const options = { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" };
  if (action === "cancel" && reason) options.body = JSON.stringify({ reason });
  try {
    const out = await api("runs/" + encodeURIComponent(run.run_id) + "/" + action, options);
    showError("");
    if (action === "retry") {
      announce("Retry queued as run " + out.run_id);
      location.hash = "#/runs/" + encodeURIComponent(out.run_id);
    } else {
      announce(action === "cancel" ? "Run canceled" : "Run signalled");
    }
  } catch (err) {
    showError(refusal(err));
    announce(refusal(err));
  }
}

// ---- the runs list -------------------------------------------------------

const PAGE_SIZE = "20";

function listQuery(params) {
  const q = new URLSearchParams({ limit: PAGE_SIZE });
  for (const k of ["status", "workflow", "label", "limit", "cursor"]) {
    if (params.get(k)) q.set(k, params.get(k));
  }
  return q;
}

function runsView(params) {
  const main = document.getElementById("main");
  const countsList = h("ul", { class: "counts", "aria-label": "Runs by status" });
  const tbody = h("tbody");
  const summary = h("p", { class: "note", id: "list-summary", "aria-live": "polite" });
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const status = h("select", { id: "f-status", name: "status" },
    h("option", { value: "" }, "any"),
    STATUSES.map((s) => h("option", { value: s, selected: params.get("status") === s }, s)));
  const workflow = h("input", { id: "f-workflow", name: "workflow", value: params.get("workflow") || "", autocomplete: "off" });
  const label = h("input", { id: "f-label", name: "label", value: params.get("label") || "", placeholder: "key=value", autocomplete: "off" });
  const limit = h("select", { id: "f-limit", name: "limit" },
    ["20", "50", "100"].map((n) => h("option", { value: n, selected: (params.get("limit") || PAGE_SIZE) === n }, n)));
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter runs" },
    h("label", { for: "f-status" }, "Status", status),
    h("label", { for: "f-workflow" }, "Workflow", workflow),
    h("label", { for: "f-label" }, "Label", label),
    h("label", { for: "f-limit" }, "Per page", limit),
    h("button", { type: "submit" }, "Apply"),
    h("button", { type: "button", onclick: () => { location.hash = "#/"; } }, "Clear"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    if (status.value) q.set("status", status.value);
    if (workflow.value.trim()) q.set("workflow", workflow.value.trim());
    if (label.value.trim()) q.set("label", label.value.trim());
    if (limit.value !== PAGE_SIZE) q.set("limit", limit.value);
    location.hash = "#/runs?" + q;
  });
  main.replaceChildren(
    h("h1", { tabindex: "-1" }, "Runs"), countsList, form, summary,
    h("div", { class: "scroll" }, h("table", { class: "cards", id: "runs" },
      h("caption", { class: "sr-only" }, "Runs, oldest first"),
      h("thead", {}, h("tr", {}, ["Run", "Workflow", "Status", "Attempt", "Created", "Updated", "Labels"].map((c) => h("th", { scope: "col" }, c)))),
      tbody)),
    pager);

  // The cursors of the pages before this one, for "Previous".
  const back = (params.get("back") || "").split(",").filter(Boolean);
  const here = params.get("cursor") || "";

  function pageLink(cursor, backs, text, id) {
    const q = listQuery(params);
    if (cursor) q.set("cursor", cursor); else q.delete("cursor");
    if (backs.length) q.set("back", backs.join(",")); else q.delete("back");
    return h("a", { href: "#/runs?" + q, id }, text);
  }

  function render(data) {
    const runs = data.page.runs;
    tbody.replaceChildren(...runs.map((r) => h("tr", { "data-run": r.run_id },
      h("td", { class: "id", "data-label": "Run" }, h("a", { href: "#/runs/" + encodeURIComponent(r.run_id) }, r.run_id)),
      h("td", { "data-label": "Workflow" }, r.workflow_name),
      h("td", { "data-label": "Status" }, statusBadge(r.status)),
      h("td", { "data-label": "Attempt" }, r.attempt),
      h("td", { "data-label": "Created" }, when(r.created_at)),
      h("td", { "data-label": "Updated" }, when(r.updated_at)),
      h("td", { "data-label": "Labels" }, Object.entries(r.labels || {}).filter(([k]) => !k.startsWith("runstate/")).map(([k, v]) => k + "=" + v).join(", ")))));
    const c = data.counts;
    countsList.replaceChildren(...STATUSES.map((s) => h("li", {},
      h("button", { type: "button", "aria-pressed": params.get("status") === s ? "true" : "false", "data-status": s,
        onclick: () => { const q = listQuery(params); q.delete("cursor"); if (params.get("status") === s) q.delete("status"); else q.set("status", s); location.hash = "#/runs?" + q; } },
        statusBadge(s), h("span", { class: "count" }, c.by_status[s]), h("span", { class: "sr-only" }, " runs")))));
    const shown = params.get("status") ? c.by_status[params.get("status")] : c.total;
    summary.textContent = runs.length + " run" + (runs.length === 1 ? "" : "s") + " on this page, " + shown + (c.capped ? "+" : "") + " matching in all";
    pager.replaceChildren(
      back.length || here ? pageLink(back[back.length - 1] === "-" ? "" : back[back.length - 1], back.slice(0, -1), "← Previous", "page-prev") : h("span", { class: "note" }, "← Previous"),
      data.page.next_cursor ? pageLink(data.page.next_cursor, [...back, here || "-"], "Next →", "page-next") : h("span", { class: "note" }, "Next →"));
    performance.mark("runs-rendered");
  }

  const q = listQuery(params);
  follow("events/runs?" + q, view.signal, (name, data) => {
    if (name === "runs") { showError(""); render(data); }
    else if (name === "problem") showError(refusal(new Problem(data)));
  });
}

// ---- one run -------------------------------------------------------------

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== "").map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function stepsTable(run) {
  return h("div", { class: "scroll" }, h("table", { class: "cards", id: "steps" },
    h("caption", { class: "sr-only" }, "Steps and their hosts"),
    h("thead", {}, h("tr", {}, ["Step", "Status", "Started", "Took", "Hosts"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, (run.steps || []).map((s) => h("tr", { "data-step": s.name },
      h("td", { "data-label": "Step" }, s.name),
      h("td", { "data-label": "Status" }, statusBadge(s.status)),
      h("td", { "data-label": "Started" }, when(s.started_at)),
      h("td", { "data-label": "Took" }, duration(s.started_at, s.finished_at)),
      h("td", { "data-label": "Hosts" }, (s.hosts || []).map((hs) => h("div", { class: "host" },
        h("strong", {}, hs.host), " ", statusBadge(hs.status), " ", duration(hs.started_at, hs.finished_at),
        hs.error ? h("pre", { class: "host-error", "aria-label": "Error on " + hs.host }, hs.error) : null,
        hs.output_summary ? h("pre", { "aria-label": "Output of " + hs.host }, hs.output_summary) : null))))))));
}

// byWhom names who wrote: the authenticated principal first, when the
// write had one, and the actor it named as whom it acted on behalf of.
function byWhom(actor) {
  const named = actor.kind + (actor.id ? " " + actor.id : "");
  if (!actor.principal) return named;
  if (actor.id === actor.principal) return h("span", {}, h("strong", {}, actor.principal), " as " + actor.kind);
  return h("span", {}, h("strong", {}, actor.principal), " on behalf of " + named);
}

function auditTable(events) {
  return h("div", { class: "scroll" }, h("table", { class: "cards", id: "audit" },
    h("caption", { class: "sr-only" }, "Audit trail, oldest first"),
    h("thead", {}, h("tr", {}, ["#", "When", "Change", "By", "Reason", "Version"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, events.map((e) => h("tr", {},
      h("td", { "data-label": "#" }, e.seq),
      h("td", { "data-label": "When" }, when(e.time)),
      h("td", { "data-label": "Change" }, e.kind === "created" ? "created " : e.kind === "rejected" ? "rejected " : "",
        e.from ? [statusBadge(e.from), " → "] : null, statusBadge(e.to), e.error_code ? " " + e.error_code : ""),
      h("td", { "data-label": "By" }, byWhom(e.actor), e.lease_token ? " (lease " + e.lease_token + ")" : ""),
      h("td", { "data-label": "Reason" }, e.reason || ""),
      h("td", { "data-label": "Version" }, e.version))))));
}

function leaseFacts(lease) {
  if (!lease || !lease.known) return "the store does not tell";
  if (!lease.token) return "never leased";
  const expired = new Date(lease.expires_at) < new Date();
  return h("span", {}, lease.owner.worker, " (token " + lease.token + "), ", expired ? "expired " : "expires ", when(lease.expires_at));
}

async function retryChain(run, signal) {
  const chain = [];
  for (let id = run.retry_of; id && chain.length < 20; ) {
    try {
      const r = await api("runs/" + encodeURIComponent(id), { signal });
      chain.push(r);
      id = r.retry_of;
    } catch {
      break;
    }
  }
  return chain;
}

function runView(id) {
  const main = document.getElementById("main");
  const signal = view.signal;
  const title = h("h1", { tabindex: "-1" }, "Run ", h("span", { class: "id" }, id));
  const head = h("div");
  const actions = h("div", { class: "actions", role: "group", "aria-label": "Operator actions" });
  const summary = h("section", { "aria-labelledby": "h-summary" });
  const chain = h("section", { "aria-labelledby": "h-chain" });
  const steps = h("section", { "aria-labelledby": "h-steps" });
  const audit = h("section", { "aria-labelledby": "h-audit" });
  main.replaceChildren(title, head, actions, summary, chain, steps, audit);
  let events = []; // the trail, grown by what is newer
  let drawnSeq = -1;
  const lastSeq = () => (events.length ? events[events.length - 1].seq : 0);
  let chainFor = null;

  async function render(run, lease, auditSeq) {
    head.replaceChildren(h("p", {}, statusBadge(run.status), " ", h("strong", {}, run.workflow_name), " · version " + run.version));
    head.querySelector(".status").id = "run-status";
    const can = [];
    if (!TERMINAL.has(run.status)) can.push(["cancel", "Cancel…"]);
    if (run.status === "waiting") can.push(["signal", "Signal…"]);
    if (TERMINAL.has(run.status) && run.status !== "success") can.push(["retry", "Retry…"]);
    actions.replaceChildren(...(canAct()
      ? can.map(([a, text]) => h("button", { type: "button", id: "action-" + a, class: a === "cancel" ? "danger" : null, onclick: () => act(run, a) }, text))
      : can.length ? [h("p", { class: "note", id: "reader-note" }, "You are signed in as a " + (me ? me.role : "reader") + ": cancel, signal and retry need an operator's token.")] : []));
    const d = run.diagnostic;
    summary.replaceChildren(h("h2", { id: "h-summary" }, "Summary"), facts([
      ["Created", when(run.created_at)],
      ["Started", run.started_at ? when(run.started_at) : ""],
      ["Finished", run.finished_at ? when(run.finished_at) : ""],
      ["Updated", when(run.updated_at)],
      ["Took", duration(run.started_at, run.finished_at)],
      ["Priority", String(run.priority)],
      ["Attempt", String(run.attempt)],
      ["Parked until", run.wake_at ? h("span", { id: "parked-until" }, when(run.wake_at), " · no worker holds it until then, or until a signal") : ""],
      ["Message", run.message],
      ["Interrupted", run.interrupted_reason],
      ["Diagnostic", d ? h("span", { id: "diagnostic" }, d.error_code + ": " + d.message + (d.retryable ? " (retryable)" : " (not retryable)") +
        (d.source_step ? " · step " + d.source_step : "") + (d.source_host ? " on " + d.source_host : "") +
        Object.entries(d.details || {}).map(([k, v]) => " · " + k + "=" + v).join("")) : ""],
      ["Lease", leaseFacts(lease)],
      ["Labels", Object.entries(run.labels || {}).map(([k, v]) => k + "=" + v).join(", ")],
    ]));
    steps.replaceChildren(h("h2", { id: "h-steps" }, "Steps (" + (run.steps || []).length + ")"), stepsTable(run));
    if (auditSeq > lastSeq()) {
      events = events.concat(await api("runs/" + encodeURIComponent(id) + "/audit?after=" + lastSeq(), { signal }));
    }
    if (drawnSeq !== lastSeq()) {
      drawnSeq = lastSeq();
      audit.replaceChildren(h("h2", { id: "h-audit" }, "Audit trail (" + events.length + ")"), auditTable(events));
    }
    if (chainFor !== run.retry_of) {
      chainFor = run.retry_of;
      const prior = await retryChain(run, signal);
      chain.replaceChildren(...(prior.length ? [h("h2", { id: "h-chain" }, "Retry of"),
        h("ol", { class: "chain" }, prior.map((r) => h("li", {}, h("a", { href: "#/runs/" + encodeURIComponent(r.run_id) }, r.run_id), " ", statusBadge(r.status), " attempt " + r.attempt)))] : []));
    }
    performance.mark("run-rendered");
  }

  let last = 0;
  let shown = "";
  async function show(run, lease, auditSeq) {
    // The stream's first event repeats what the first read showed: a page
    // redrawn for nothing would move the focus and the buttons under the
    // pointer.
    const key = JSON.stringify([run.version, lease, auditSeq]);
    if (key === shown) return;
    shown = key;
    const mine = ++last;
    try {
      showError("");
      await render(run, lease, auditSeq);
    } catch (err) {
      if (!signal.aborted && mine === last) showError(refusal(err));
    }
  }

  // The first render reads the API directly; the stream then follows.
  Promise.all([api("runs/" + encodeURIComponent(id), { signal }), api("runs/" + encodeURIComponent(id) + "/lease", { signal }),
    api("runs/" + encodeURIComponent(id) + "/audit", { signal })])
    .then(([run, lease, trail]) => { events = trail; return show(run, lease, lastSeq()); })
    .then(() => follow("runs/" + encodeURIComponent(id) + "/events", signal, (name, data) => {
      if (name === "run") show(data.run, data.lease, data.audit_seq);
      else if (name === "problem") showError(refusal(new Problem(data)));
    }))
    .catch((err) => { if (!signal.aborted) showError(refusal(err)); });
}

// ---- dead letters ----------------------------------------------------------

async function deadLettersView() {
  const main = document.getElementById("main");
  main.replaceChildren(h("h1", { tabindex: "-1" }, "Dead letters"), h("p", { class: "note" }, "Webhook notifications that could not be delivered."));
  const list = await api("deadletters");
  main.append(list.length ? h("div", { class: "scroll" }, h("table", { class: "cards", id: "deadletters" },
    h("thead", {}, h("tr", {}, ["When", "URL", "Run", "Status", "Attempts", "Last error"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, list.map((d) => h("tr", {},
      h("td", { "data-label": "When" }, when(d.at)),
      h("td", { "data-label": "URL" }, d.url),
      h("td", { "data-label": "Run", class: "id" }, h("a", { href: "#/runs/" + encodeURIComponent(d.event.run_id) }, d.event.run_id)),
      h("td", { "data-label": "Status" }, statusBadge(d.event.status)),
      h("td", { "data-label": "Attempts" }, d.attempts),
      h("td", { "data-label": "Last error" }, d.last_error))))))
    : h("p", {}, "None."));
  setLive(false, "not live");
}

// ---- routing -------------------------------------------------------------

async function route() {
  if (view) view.abort();
  view = new AbortController();
  showError("");
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("nav a[data-nav]")) {
    const current = a.dataset.nav === (path.startsWith("/deadletters") ? "deadletters" : "runs");
    if (current) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  try {
    await whoami();
  } catch (err) {
    if (!(err instanceof Problem && err.problem.status === 401)) showError(refusal(err));
    return;
  }
  try {
    const run = path.match(/^\/runs\/([^/]+)$/);
    if (run) {
      document.title = "Run " + decodeURIComponent(run[1]) + " · runstate";
      runView(decodeURIComponent(run[1]));
    } else if (path === "/deadletters") {
      document.title = "Dead letters · runstate";
      await deadLettersView();
    } else {
      document.title = "Runs · runstate";
      runsView(params);
    }
  } catch (err) {
    if (!view.signal.aborted) showError(refusal(err));
  }
  const heading = document.querySelector("main h1");
  if (heading && document.activeElement === document.body) heading.focus();
}

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  me = null;
  document.getElementById("who").textContent = "";
  document.getElementById("signout").hidden = true;
  signIn();
});
window.addEventListener("hashchange", () => { route().then(() => document.querySelector("main h1")?.focus()); });
setInterval(refreshTimes, 15000);
route();
