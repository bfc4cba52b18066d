// The hosted connect page: an end user pairs a machine with the app, in a session
// the app minted for them. The session token arrives in the URL fragment (never
// sent to any server), is kept in this tab's sessionStorage and taken out of the
// address bar at once.

const SESSION_KEY = "svc.session";
const MACHINES_REFRESH_MS = 5000;

const $ = (id) => document.getElementById(id);
const show = (el, on = true) => (el.hidden = !on);

/** Reads the fragment, keeps its session in this tab and takes it out of the address bar. */
function takeFragment() {
  const f = new URLSearchParams(location.hash.slice(1));
  if (f.get("session")) sessionStorage.setItem(SESSION_KEY, f.get("session"));
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  return f;
}

let fragment = takeFragment();
let token = sessionStorage.getItem(SESSION_KEY);
let bound = false;

let appName = "the app";
let ended = false;
let pending = null; // the code being confirmed, as the server showed it
let machinesTimer = null;

class ApiError extends Error {
  constructor(status, body, retryAfter) {
    super(body?.error?.message ?? `The service answered ${status}.`);
    this.status = status;
    this.code = body?.error?.code ?? null;
    this.retryAfter = retryAfter;
  }
}

async function api(method, path, body) {
  const res = await fetch(new URL(`v1${path}`, document.baseURI), {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    credentials: "omit",
    cache: "no-store",
  });
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, data, res.headers.get("retry-after"));
  return data;
}

/** Ends the page for good: the session is over or was never there. */
function stop(message) {
  ended = true;
  sessionStorage.removeItem(SESSION_KEY);
  clearInterval(machinesTimer);
  $("notice").textContent = message;
  show($("notice"));
  show($("steps"), false);
  show($("machines-section"), false);
}

/** The words for a refused session: the API's message says whether the app ended it or it expired. */
function expiredMessage(err) {
  if (err?.code === "session_expired" && /was ended/.test(err.message)) {
    return `This session was ended by ${appName} (for example when you signed out there). Go back to ${appName} and open "Connect a machine" again.`;
  }
  return `This link has expired (links last ten minutes). Go back to ${appName} and open "Connect a machine" again.`;
}

/** The words for an error answer, or null when the whole page must stop. */
function explain(err, code) {
  if (err.status === 401) {
    stop(expiredMessage(err));
    return null;
  }
  switch (err.status) {
    case 404:
      return `No pairing request has the code ${code}. Check the code on your machine's screen.`;
    case 410:
      return `The code ${code} has expired. Run the command on your machine again to get a new code.`;
    case 409:
      return `The code ${code} has already been answered. Run the command again to pair another machine.`;
    case 429:
      return `Too many wrong codes. Try again in ${err.retryAfter ?? "a few"} seconds.`;
    case 400:
      return `${code} is not a code: codes are 8 letters without vowels (BCDFGHJKLMNPQRSTVWXZ), like BCDF-GHJK.`;
    default:
      return `Something went wrong (${err.message}). Try again.`;
  }
}

function displayed(typed) {
  const c = typed.toUpperCase().replace(/[\s-]/g, "");
  return c.length === 8 ? `${c.slice(0, 4)}-${c.slice(4)}` : typed.trim();
}

async function lookUp(event) {
  event.preventDefault();
  const typed = $("code").value;
  show($("code-error"), false);
  show($("result"), false);
  $("continue").disabled = true;
  try {
    const d = await api("GET", `/device/lookup?code=${encodeURIComponent(typed)}`);
    pending = d.user_code;
    $("d-hostname").textContent = d.hostname;
    $("d-system").textContent = `${d.platform} ${d.arch}`;
    $("d-client").textContent = d.client_version ? `${d.client} ${d.client_version}` : d.client;
    $("d-code").textContent = d.user_code;
    $("confirm-code").textContent = d.user_code;
    show($("answer-error"), false);
    show($("step-confirm"));
    // Focus the question, not a button: Enter must not approve before the user has compared the code.
    $("h-confirm").focus();
  } catch (err) {
    const words = explain(err, displayed(typed));
    if (words) {
      $("code-error").textContent = words;
      show($("code-error"));
      show($("step-confirm"), false);
    }
  } finally {
    $("continue").disabled = false;
  }
}

async function answer(decision) {
  if (!pending) return;
  const code = pending;
  const hostname = $("d-hostname").textContent;
  $("approve").disabled = $("deny").disabled = true;
  try {
    await api("POST", `/device/${decision}`, { user_code: code });
    pending = null;
    show($("step-confirm"), false);
    $("code").value = "";
    $("result").textContent =
      decision === "approve"
        ? `Approved. ${hostname} is finishing pairing and will appear under Your machines.`
        : `Denied. ${hostname} was told no; nothing was paired.`;
    show($("result"));
    if (decision === "approve") watchForNewMachine();
    else refreshMachines();
  } catch (err) {
    const words = explain(err, code);
    if (words) {
      $("answer-error").textContent = words;
      show($("answer-error"));
    }
  } finally {
    $("approve").disabled = $("deny").disabled = false;
  }
}

function renderMachines(machines) {
  const list = $("machines");
  list.replaceChildren(
    ...machines.map((m) => {
      const li = document.createElement("li");
      li.dataset.machineId = m.id;
      const info = document.createElement("div");
      const name = document.createElement("strong");
      name.textContent = m.hostname;
      const meta = document.createElement("div");
      meta.className = "machine-meta";
      const runtimes = m.runtimes.map((r) => `${r.name} (${r.models.length} model${r.models.length === 1 ? "" : "s"})`).join(", ");
      meta.textContent = `${m.platform} ${m.arch} · ${m.client}${runtimes ? ` · ${runtimes}` : ""}`;
      info.append(name, meta);
      const state = document.createElement("span");
      state.className = `state ${m.state}`;
      state.textContent = m.state;
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "secondary remove";
      remove.textContent = "Remove";
      remove.setAttribute("aria-label", `Remove ${m.hostname}`);
      remove.addEventListener("click", () => removeMachine(m, remove));
      const side = document.createElement("div");
      side.className = "machine-side";
      side.append(state, remove);
      li.append(info, side);
      return li;
    }),
  );
  show($("no-machines"), machines.length === 0);
}

/** Removes a machine after the user confirms: its token stops working and its connection closes at once. */
async function removeMachine(m, button) {
  if (!confirm(`Remove ${m.hostname}? It will stop serving ${appName} at once; to use it again, pair it again.`)) return;
  button.disabled = true;
  try {
    await api("DELETE", `/machines/${encodeURIComponent(m.id)}`);
    $("result").textContent = `Removed ${m.hostname}.`;
    show($("result"));
  } catch (err) {
    if (explain(err, "") !== null) {
      $("result").textContent = `Could not remove ${m.hostname}: ${err.message}`;
      show($("result"));
    }
  } finally {
    refreshMachines();
  }
}

/** Fetches and shows the machine list; returns it (null when it could not). */
async function refreshMachines() {
  if (ended) return null;
  try {
    const machines = (await api("GET", "/machines")).data;
    renderMachines(machines);
    return machines;
  } catch (err) {
    explain(err, "");
    return null;
  }
}

/**
 * After an approval the machine exists once it fetches its token (its next poll, a few
 * seconds at most): the list is fetched at once and then every second until a machine
 * that was not there appears, so it shows without waiting for the regular refresh.
 */
async function watchForNewMachine() {
  const before = new Set([...document.querySelectorAll("#machines li")].map((li) => li.dataset.machineId));
  for (let i = 0; i < 60 && !ended; i++) {
    const machines = await refreshMachines();
    if (machines?.some((m) => !before.has(m.id))) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

async function start() {
  if (!token) {
    stop(`Open this page from the app you are connecting: its "Connect a machine" link signs you in here.`);
    return;
  }
  try {
    const info = await api("GET", "/connect");
    appName = info.app.name;
    $("app-name").textContent = appName;
    for (const el of document.querySelectorAll(".app-name-inline")) el.textContent = appName;
    document.title = `Connect a machine · ${appName}`;
    $("pairing-command").textContent = info.pairingCommand;
  } catch (err) {
    if (err.status === 401) stop(expiredMessage(err));
    else stop(`This page could not load: ${err.message}`);
    return;
  }
  show($("notice"), false);
  show($("steps"));
  show($("machines-section"));
  if (fragment.get("code")) $("code").value = fragment.get("code");
  if (!bound) {
    bound = true;
    $("code-form").addEventListener("submit", lookUp);
    $("approve").addEventListener("click", () => answer("approve"));
    $("deny").addEventListener("click", () => answer("deny"));
    $("copy").addEventListener("click", async () => {
      await navigator.clipboard?.writeText($("pairing-command").textContent).catch(() => {});
      $("copy").textContent = "Copied";
      setTimeout(() => ($("copy").textContent = "Copy"), 1500);
    });
  }
  $("code").focus();
  await refreshMachines();
  clearInterval(machinesTimer);
  machinesTimer = setInterval(refreshMachines, MACHINES_REFRESH_MS);
}

// A session arriving after load (the app sets the fragment on an open tab, or a second link
// opened in it): the page starts over with it, as if it had been opened with it.
window.addEventListener("hashchange", () => {
  const f = takeFragment();
  if (!f.get("session")) return;
  fragment = f;
  token = f.get("session");
  ended = false;
  pending = null;
  clearInterval(machinesTimer);
  show($("step-confirm"), false);
  show($("result"), false);
  start();
});

start();
