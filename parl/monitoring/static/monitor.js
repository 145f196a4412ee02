// The parl monitor page: polls /api/status once a second and redraws the tables.
"use strict";

const REFRESH_MS = 1000;
const openOutputs = new Set();  // actors whose output the user opened stay open

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function duration(s) {
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// A sparkline of percentages (0-100), newest on the right.
function spark(values, kind) {
  const w = 120, h = 24;
  const points = values.slice(-w).map((v, i, all) =>
    `${(w - all.length + i).toFixed(0)},${(h - 1 - (v / 100) * (h - 2)).toFixed(1)}`).join(" ");
  return `<svg class="spark ${kind}" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">` +
    `<rect width="${w}" height="${h}"></rect><polyline points="${points}"></polyline></svg>`;
}

function hostRow(host) {
  const cpu = host.cpu_percent === null ? "–" : `${host.cpu_percent.toFixed(0)}%`;
  const mem = `${bytes(host.memory_used)} / ${bytes(host.memory_total)}`;
  return `<tr data-host="${esc(host.name)}"><td>${esc(host.name)}</td>` +
    `<td class="num">${host.cpus}</td><td class="num">${host.load.map((x) => x.toFixed(2)).join(" ")}</td>` +
    `<td class="num">${cpu}${spark(host.cpu_history, "cpu")}</td>` +
    `<td class="num">${mem}${spark(host.memory_history, "mem")}</td>` +
    `<td class="num">${host.used_slots} / ${host.slots}</td></tr>`;
}

function stateCell(actor) {
  let text = actor.state;
  if (actor.state === "busy" && actor.method) text = `busy: ${actor.method}()`;
  let cell = `<span class="state state-${esc(actor.state)}">${esc(text)}</span>`;
  if (actor.reason) cell += `<div class="reason">${esc(actor.reason)}</div>`;
  return cell;
}

function actorRow(actor) {
  const lines = actor.output || [];
  const open = openOutputs.has(actor.id) ? " open" : "";
  const output = lines.length
    ? `<details data-actor="${esc(actor.id)}"${open}><summary>${lines.length} line${lines.length === 1 ? "" : "s"}</summary>` +
      `<pre class="output">${esc(lines.join("\n"))}</pre></details>`
    : `<span class="empty">none</span>`;
  return `<tr class="actor" data-actor="${esc(actor.id)}" data-state="${esc(actor.state)}">` +
    `<td>${esc(actor.class)}</td><td class="num">${actor.pid ?? "–"}</td><td>${esc(actor.host)}</td>` +
    `<td class="num">${duration(actor.age_s)}</td><td>${stateCell(actor)}</td>` +
    `<td class="num">${actor.calls}</td><td class="num">${bytes(actor.memory)}</td>` +
    `<td>${output}</td></tr>`;
}

function clientBlock(client) {
  const rows = client.actors.map(actorRow).join("") ||
    `<tr><td colspan="8" class="empty">no actors</td></tr>`;
  return `<h3>client ${esc(client.id)}</h3><table class="actors"><thead><tr><th>class</th>` +
    `<th>pid</th><th>host</th><th>age</th><th>state</th><th>calls</th><th>memory</th>` +
    `<th>last output</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function render(status) {
  const started = performance.now();
  const actors = status.clients.reduce((n, c) => n + c.actors.length, 0);
  const summary = document.getElementById("summary");
  summary.className = "summary";
  summary.textContent = `parl ${status.version} · ${status.mode} · up ${duration(status.uptime_s)} · ` +
    `${status.hosts.length} host(s) · ${status.clients.length} client(s) · ${actors} actor(s)`;
  document.querySelector("#hosts tbody").innerHTML = status.hosts.map(hostRow).join("");
  document.getElementById("clients").innerHTML = status.clients.map(clientBlock).join("") ||
    `<p class="empty">no clients connected</p>`;
  void document.body.offsetHeight;  // lay the page out now, so that the time includes it
  const took = performance.now() - started;
  const footer = document.getElementById("footer");
  footer.dataset.renderMs = took.toFixed(1);
  footer.textContent = `updated ${new Date().toLocaleTimeString()} · drawn in ${took.toFixed(0)} ms`;
}

async function refresh() {
  try {
    const response = await fetch("/api/status", { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
  } catch (err) {
    const summary = document.getElementById("summary");
    summary.className = "summary error";
    summary.textContent = `cannot reach the monitor (${err.message}); retrying…`;
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

document.addEventListener("toggle", (event) => {
  const id = event.target.dataset && event.target.dataset.actor;
  if (!id) return;
  if (event.target.open) openOutputs.add(id); else openOutputs.delete(id);
}, true);

refresh();
