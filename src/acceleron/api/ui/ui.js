// Acceleron's read-only operator page: plain JavaScript, no build step, no outside asset.
// It reads the REST API every POLL_MS milliseconds with the token it was given (Keystone)
// or none (the all-in-one).
"use strict";

const POLL_MS = 2000;
const HEADERS = { "OpenStack-API-Version": "accelerator 2.17", Accept: "application/json" };
let token = sessionStorage.getItem("acceleron-token");

class Unauthorized extends Error {}

async function get(path) {
  const headers = { ...HEADERS };
  if (token) headers["X-Auth-Token"] = token;
  const answer = await fetch(path, { headers });
  if (answer.status === 401) throw new Unauthorized();
  if (!answer.ok) throw new Error(`${path}: ${answer.status}`);
  return answer.json();
}

async function all(path, key) {
  // Every page of a paged list (the API's *_links name the next one).
  let found = [];
  let next = path;
  while (next) {
    const page = await get(next);
    found = found.concat(page[key]);
    const link = (page[`${key}_links`] || []).find((l) => l.rel === "next");
    next = link ? new URL(link.href, location.href).pathname + new URL(link.href, location.href).search : null;
  }
  return found;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) node.append(child);
  return node;
}

function bar(used, total, label) {
  const percent = total ? Math.round((100 * used) / total) : 0;
  const inner = el("span");
  inner.style.width = `${percent}%`;
  return el("span", { class: "usage", "data-usage": label }, `${label} `,
    el("span", { class: "bar", title: `${used} of ${total}` }, inner), ` ${used}/${total}`);
}

function badge(text, good) {
  return el("span", { class: `badge ${good === true ? "ok" : good === false ? "bad" : "warn"}` }, text);
}

function shortId(id) {
  return (id || "").replaceAll("-", "").slice(0, 8).toLowerCase();
}

function functionNames(bitstreams) {
  // Function uuid (lower case, no hyphens) -> the name a bitstream the caller sees gives it.
  const names = new Map();
  for (const b of bitstreams) {
    if (b.function_uuid && b.function_name) names.set(b.function_uuid.replaceAll("-", "").toLowerCase(), b.function_name);
  }
  return names;
}

function functionsOf(dep, names) {
  // What a region holds, by name where a bitstream names it, else by its first 8 digits.
  const ids = dep.function_uuids && dep.function_uuids.length ? dep.function_uuids : dep.function_uuid ? [dep.function_uuid] : [];
  return ids.map((id) => names.get(id.replaceAll("-", "").toLowerCase()) || shortId(id));
}

function renderTree(hosts, devices, deployables, functions) {
  const tree = document.getElementById("tree");
  const open = new Set([...tree.querySelectorAll("details[open]")].map((d) => d.dataset.key));
  const first = tree.childElementCount === 0;
  tree.replaceChildren();
  const names = [...new Set([...hosts.map((h) => h.hostname), ...devices.map((d) => d.hostname)])].sort();
  for (const name of names) {
    const mine = devices.filter((d) => d.hostname === name);
    const host = el("details", { class: "host", "data-host": name, "data-key": `h:${name}` },
      el("summary", {}, el("strong", {}, name), ` · ${mine.length} device(s)`));
    host.open = first || open.has(`h:${name}`);
    for (const device of mine) {
      const regions = deployables.filter((d) => d.device_uuid === device.uuid && d.kind !== "device");
      const node = el("details", { class: "device", "data-device": device.uuid, "data-key": `d:${device.uuid}` },
        el("summary", {}, `${device.type} ${device.model} `, el("code", {}, device.pci_address || ""), " ",
          badge(device.health || "healthy", (device.health || "healthy") === "healthy"), " ",
          badge(device.status, device.status === "enabled"),
          device.cleaning ? " " : "", device.cleaning ? badge(`cleaning ${device.cleaning}`) : ""));
      node.open = first || open.has(`d:${device.uuid}`);
      const usage = {};
      for (const dep of regions) {
        const handles = dep.attach_handles || [];
        const rc = dep.resource_class || `${device.type} ${dep.kind}`;
        usage[rc] = usage[rc] || [0, 0];
        usage[rc][0] += handles.filter((h) => h.in_use).length;
        usage[rc][1] += handles.length;
        const line = el("div", { class: "deployable", "data-uuid": dep.uuid },
          `${dep.kind} ${dep.name} `, badge(dep.availability, dep.availability === "available"));
        if (dep.cleaning) line.append(" ", el("span", { class: "cleaning" }, badge(`cleaning ${dep.cleaning}`)));
        if (dep.status === "maintaining") line.append(" ", badge(`maintenance: ${dep.maintenance_reason || ""}`, false));
        const held = functionsOf(dep, functions);
        if (held.length) line.append(" ", el("span", { class: "function" }, `function ${held.join(", ")}`));
        if (dep.program_phase) {
          line.append(" programming: ", el("span", { class: "phase" }, dep.program_phase), " ",
            el("progress", { max: 100, value: dep.program_progress || 0 }));
        }
        node.append(line);
      }
      for (const [rc, [used, total]] of Object.entries(usage)) if (total) node.append(bar(used, total, rc));
      host.append(node);
    }
    tree.append(host);
  }
  if (!names.length) tree.append(el("p", { class: "muted" }, "No host has reported yet."));
}

function renderArqs(arqs) {
  const body = document.querySelector("#arqs tbody");
  body.replaceChildren();
  for (const arq of arqs) {
    const progress = arq.phase ? el("progress", { max: 100, value: arq.progress || 0 }) : "";
    body.append(el("tr", { "data-uuid": arq.uuid },
      el("td", { class: "mono" }, arq.uuid.slice(0, 8)), el("td", { class: "state" }, arq.state),
      el("td", {}, arq.device_profile_name), el("td", {}, arq.hostname || ""),
      el("td", { class: "mono" }, (arq.instance_uuid || "").slice(0, 8)),
      el("td", { class: "phase" }, arq.phase || ""), el("td", { class: "progress" }, progress)));
  }
  document.getElementById("no-arqs").hidden = arqs.length > 0;
}

function renderSync(hosts) {
  const body = document.querySelector("#sync tbody");
  body.replaceChildren();
  for (const host of hosts) {
    const synced = host.placement_synced;
    body.append(el("tr", { "data-host": host.hostname }, el("td", {}, host.hostname),
      el("td", {}, host.last_report_at ? new Date(host.last_report_at).toLocaleString() : "never"),
      el("td", {}, synced === null ? badge("not published") : badge(synced ? "in sync" : "waiting", synced))));
  }
}

const BOUND = /^acceleron_bind_duration_seconds_count\{[^}]*outcome="bound"[^}]*\}\s+([0-9.eE+]+)/;

async function boundSoFar() {
  // The API's count of binds that ended bound (a Prometheus counter: requests deleted
  // since stay counted); null where the API serves no metrics.
  const answer = await fetch("/metrics");
  if (!answer.ok) return null;
  let total = 0;
  for (const line of (await answer.text()).split("\n")) {
    const found = BOUND.exec(line);
    if (found) total += Number(found[1]);
  }
  return total;
}

function recordBinds(count) {
  // Samples of the counter, kept for this tab (an hour of them): [[time, count], ...].
  const samples = JSON.parse(sessionStorage.getItem("acceleron-binds") || "[]");
  const now = Date.now();
  samples.push([now, count]);
  const kept = samples.filter(([t]) => now - t < 3600 * 1000);
  sessionStorage.setItem("acceleron-binds", JSON.stringify(kept));
  return kept;
}

function renderChart(count) {
  const canvas = document.getElementById("binds");
  const note = document.getElementById("binds-note");
  const ctx = canvas.getContext("2d");
  const now = Date.now();
  const minutes = new Array(60).fill(0);
  if (count === null) {
    note.textContent = "This API serves no metrics ([metrics] enabled = false): no binds to count.";
  } else {
    const samples = recordBinds(count);
    for (let i = 1; i < samples.length; i++) {
      const [t, after] = samples[i];
      const before = samples[i - 1][1];
      const bound = after >= before ? after - before : after; // a restart starts it again
      const ago = Math.floor((now - t) / 60000);
      if (ago >= 0 && ago < 60) minutes[59 - ago] += bound;
    }
    note.textContent = "Binds that ended bound, per minute, since this page opened (the API's " +
      "acceleron_bind_duration_seconds counter: requests deleted since still count).";
  }
  const top = Math.max(1, ...minutes);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const width = canvas.width / 60;
  ctx.fillStyle = "#2563eb";
  minutes.forEach((count, i) => {
    const height = ((canvas.height - 20) * count) / top;
    ctx.fillRect(i * width + 1, canvas.height - height, width - 2, height);
  });
  ctx.fillStyle = "#6b7280";
  ctx.fillText(`max ${top} per minute`, 4, 12);
  canvas.dataset.total = String(minutes.reduce((a, b) => a + b, 0));
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [hosts, devices, deployables, arqs, bitstreams, bound] = await Promise.all([
      all("/v2/hosts", "hosts"), all("/v2/devices", "devices"),
      all("/v2/deployables", "deployables"), all("/v2/accelerator_requests", "arqs"),
      all("/v2/bitstreams", "bitstreams"), boundSoFar(),
    ]);
    document.getElementById("login").hidden = true;
    document.getElementById("main").hidden = false;
    renderTree(hosts, devices, deployables, functionNames(bitstreams));
    renderArqs(arqs);
    renderSync(hosts);
    renderChart(bound);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "yes";
  } catch (error) {
    if (error instanceof Unauthorized) {
      sessionStorage.removeItem("acceleron-token");
      document.getElementById("main").hidden = true;
      document.getElementById("login").hidden = false;
      document.getElementById("login-error").textContent = token ? "That token was refused." : "";
      token = null;
      status.textContent = "a token is needed";
      return false;
    }
    status.textContent = `cannot read the API: ${error.message}`;
  }
  return true;
}

async function loop() {
  if (await refresh()) setTimeout(loop, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    token = document.getElementById("token").value.trim();
    sessionStorage.setItem("acceleron-token", token);
    loop();
  });
  loop();
});
