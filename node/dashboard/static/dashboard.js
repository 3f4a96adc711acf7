// The dashboard page: polls the server's JSON endpoints and redraws the members table, the charts and the
// nodes' peer tables. Every value a peer or a file could have written reaches the document as text
// (textContent, or an attribute set with setAttribute), never as markup; the server's Content-Security-Policy
// forbids inline script besides. The plots are plain SVG.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const DASHES = ["", "7 4", "2 3", "10 3 2 3"]; // a chart's lines: solid, dashed, dotted, dash-dot
const W = 420, H = 210, LEFT = 52, RIGHT = 12, TOP = 10, BOTTOM = 26;

let layout = null;

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
  return node;
}

function cell(row, text, className) {
  const td = el("td", text, className);
  row.appendChild(td);
  return td;
}

function fmt(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  const size = Math.abs(value);
  if (size >= 1e9) return (value / 1e9).toFixed(1) + " G";
  if (size >= 1e6) return (value / 1e6).toFixed(1) + " M";
  if (size >= 1e3) return (value / 1e3).toFixed(1) + " k";
  if (Number.isInteger(value)) return String(value);
  return value.toPrecision(3);
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Date.now() / 1000 - seconds);
  return s < 120 ? `${s.toFixed(0)} s ago` : `${(s / 60).toFixed(0)} min ago`;
}

function nodeColor(index) {
  return COLORS[index % COLORS.length];
}

function swatch(color, dash) {
  const box = svg("svg", { width: 26, height: 10, class: "swatch-line" });
  box.appendChild(svg("line", { x1: 0, y1: 5, x2: 26, y2: 5, stroke: color, "stroke-width": 2.5,
                                 "stroke-dasharray": dash || "" }));
  return box;
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

// --- members ---------------------------------------------------------------------------------------------

function renderMembers(data) {
  const note = document.getElementById("members-note");
  const body = document.querySelector("#members tbody");
  const rows = data.members.map((member) => {
    const row = el("tr", null, "member");
    row.setAttribute("data-peer-id", member.peer_id);
    cell(row, member.peer_id, "id");
    cell(row, member.model, "clip").setAttribute("title", member.model);
    cell(row, member.adapter === "lora" ? "LoRA" : member.adapter);
    cell(row, member.tokenizer, "clip id").setAttribute("title", member.tokenizer);
    cell(row, member.policy_version, "number");
    cell(row, member.published_batches, "number");
    cell(row, fmt(member.published_tokens), "number");
    cell(row, ago(member.last_seen), "number");
    cell(row, member.reached, "id").setAttribute("title", (member.relays || []).join(", "));
    return row;
  });
  body.replaceChildren(...rows);
  let text = `${data.count} member${data.count === 1 ? "" : "s"} announcing`;
  if (data.count > data.members.length) text += ` (the first ${data.members.length} shown)`;
  if (data.estimated !== null && data.estimated !== undefined) text += `; ${data.shards_read}`;
  if (data.read_at !== null) text += `, read from the DHT ${ago(data.read_at)}`;
  note.className = data.error ? "error" : "quiet";
  note.textContent = data.error ? `${text}; the last read failed: ${data.error}` : text;
  if (data.read_at === null && !data.error) note.textContent = "joining the swarm…";
}

// --- charts ----------------------------------------------------------------------------------------------

function extent(values, floor, ceiling) {
  let low = Math.min(...values), high = Math.max(...values);
  if (floor !== undefined) low = Math.min(low, floor);
  if (ceiling !== undefined) high = Math.max(high, ceiling);
  if (low === high) { low -= 1; high += 1; }
  return [low, high];
}

function drawChart(chart, nodes) {
  const figure = el("figure", null, "chart");
  figure.appendChild(el("figcaption", chart.title));
  const plot = svg("svg", { class: "plot", viewBox: `0 0 ${W} ${H}`, role: "img" });
  const drawn = [];
  nodes.forEach((node, n) => chart.lines.forEach((line, l) => {
    const points = node.series[line.key] || [];
    if (points.length) drawn.push({ points, color: nodeColor(n), dash: DASHES[l % DASHES.length] });
  }));
  const xs = drawn.flatMap((d) => d.points.map((p) => p[0]));
  const ys = drawn.flatMap((d) => d.points.map((p) => p[1]));
  if (!xs.length) {
    const empty = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" });
    empty.textContent = "no data yet";
    plot.appendChild(empty);
  } else {
    const [x0, x1] = extent(xs);
    const [y0, y1] = chart.zero_to_one ? extent(ys, 0, 1) : extent(ys, Math.min(0, ...ys));
    const sx = (x) => LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    const sy = (y) => H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);
    for (let i = 0; i <= 4; i++) {
      const y = y0 + (y1 - y0) * i / 4;
      plot.appendChild(svg("line", { class: "grid", x1: LEFT, x2: W - RIGHT, y1: sy(y), y2: sy(y) }));
      const label = svg("text", { x: LEFT - 4, y: sy(y) + 4, "text-anchor": "end" });
      label.textContent = fmt(y);
      plot.appendChild(label);
      const x = x0 + (x1 - x0) * i / 4;
      const tick = svg("text", { x: sx(x), y: H - BOTTOM + 14, "text-anchor": "middle" });
      tick.textContent = fmt(Math.round(x));
      plot.appendChild(tick);
    }
    plot.appendChild(svg("line", { class: "axis", x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM }));
    plot.appendChild(svg("line", { class: "axis", x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM }));
    const round = svg("text", { x: W - RIGHT, y: H - 2, "text-anchor": "end" });
    round.textContent = "round";
    plot.appendChild(round);
    for (const d of drawn) {
      if (d.points.length === 1) {
        const [x, y] = d.points[0];
        plot.appendChild(svg("circle", { class: "marker", cx: sx(x), cy: sy(y), r: 3, fill: d.color }));
        continue;
      }
      const path = d.points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ");
      plot.appendChild(svg("polyline", { class: "series", points: path, stroke: d.color,
                                         "stroke-dasharray": d.dash }));
    }
  }
  figure.appendChild(plot);
  const key = el("div", null, "legend");
  chart.lines.forEach((line, l) => {
    const entry = el("span");
    entry.appendChild(swatch("#555", DASHES[l % DASHES.length]));
    entry.appendChild(document.createTextNode(line.label));
    key.appendChild(entry);
  });
  figure.appendChild(key);
  return figure;
}

function renderCharts(nodes) {
  const legend = document.getElementById("legend");
  legend.replaceChildren(...nodes.map((node, n) => {
    const entry = el("span");
    entry.appendChild(swatch(nodeColor(n)));
    entry.appendChild(document.createTextNode(node.name));
    return entry;
  }));
  if (!nodes.length) legend.textContent = "no --node folder given";
  document.getElementById("charts").replaceChildren(...layout.charts.map((chart) => drawChart(chart, nodes)));
}

// --- nodes -----------------------------------------------------------------------------------------------

function nodeSummary(node) {
  const latest = node.latest;
  const parts = [node.folder];
  if (latest.round !== undefined) parts.push(`round ${latest.round}`, `policy version ${fmt(latest.policy_version)}`);
  else parts.push("no round recorded yet");
  if (latest.eval_accuracy !== undefined) {
    const error = latest.eval_standard_error ? ` ± ${latest.eval_standard_error.toFixed(3)}` : "";
    parts.push(`held-out accuracy ${latest.eval_accuracy.toFixed(3)}${error} (round ${latest.eval_round})`);
  }
  if (latest.time) parts.push(`last record ${ago(latest.time)}`);
  if (node.damaged_lines) parts.push(`${node.damaged_lines} damaged lines skipped`);
  return parts.join(" · ");
}

function peersTable(peers, models) {
  const table = el("table", null, "peers");
  const head = el("tr");
  for (const name of ["peer id", "model", "score", "good", "bad", "muted", "mutes", "rejections"]) {
    head.appendChild(el("th", name));
  }
  table.appendChild(el("thead")).appendChild(head);
  const body = el("tbody");
  for (const peer of peers) {
    const muted = peer.muted_for_s !== null;
    const row = el("tr", null, muted ? "peer muted" : "peer");
    row.setAttribute("data-peer-id", peer.peer_id);
    cell(row, peer.peer_id, "id");
    cell(row, models.get(peer.peer_id) || "–", "clip");
    cell(row, peer.score === null ? "–" : peer.score.toFixed(2), "number");
    cell(row, fmt(peer.good), "number");
    cell(row, fmt(peer.bad), "number");
    cell(row, muted ? `${peer.muted_for_s.toFixed(0)} s more` : (peer.score === null ? "–" : "no"));
    cell(row, fmt(peer.mutes), "number");
    const reasons = Object.entries(peer.rejections).map(([reason, count]) => `${reason} ${count}`);
    cell(row, reasons.length ? reasons.join(", ") : "–");
    body.appendChild(row);
  }
  table.appendChild(body);
  return table;
}

function renderNodes(nodes, models) {
  const boxes = nodes.map((node, n) => {
    const box = el("div", null, "node");
    box.setAttribute("data-node", node.name);
    const title = el("h3");
    title.appendChild(swatch(nodeColor(n)));
    title.appendChild(document.createTextNode(node.name));
    box.appendChild(title);
    box.appendChild(el("p", nodeSummary(node), "quiet"));
    const view = node.peers;
    if (view.error) {
      box.appendChild(el("p", view.error, "quiet"));
      return box;
    }
    let line = `its view of round ${view.round}, ${ago(view.time)}: ${view.announce_failures} failed ` +
      `announcements, ${view.poll_failures} failed reads of the DHT`;
    if (view.alone_seconds >= 60) line += `; no peer seen for ${view.alone_seconds.toFixed(0)} s`;
    box.appendChild(el("p", line, "quiet"));
    box.appendChild(peersTable(view.peers, models));
    if (view.more) box.appendChild(el("p", `and ${view.more} more peers`, "quiet"));
    return box;
  });
  document.getElementById("nodes").replaceChildren(...boxes);
}

// --- the loop --------------------------------------------------------------------------------------------

async function refresh() {
  const updated = document.getElementById("updated");
  try {
    const [members, nodes] = await Promise.all([getJson("/api/members"), getJson("/api/nodes")]);
    renderMembers(members);
    renderCharts(nodes.nodes);
    renderNodes(nodes.nodes, new Map(members.members.map((m) => [m.peer_id, m.model])));
    updated.className = "quiet";
    updated.textContent = `updated ${new Date().toLocaleTimeString()}, every ${layout.refresh_s} s`;
    document.body.setAttribute("data-state", "shown");
  } catch (error) {
    updated.className = "error";
    updated.textContent = `cannot reach the dashboard's server: ${error.message}`;
  }
  setTimeout(refresh, layout.refresh_s * 1000);
}

async function start() {
  try {
    layout = await getJson("/api/layout");
  } catch (error) {
    const updated = document.getElementById("updated");
    updated.className = "error";
    updated.textContent = `cannot reach the dashboard's server: ${error.message}`;
    setTimeout(start, 5000);
    return;
  }
  document.getElementById("run").textContent = layout.run_id === null ? "no swarm: node folders only"
    : `run ${layout.run_id}`;
  if (!layout.members) document.getElementById("members-section").hidden = true;
  refresh();
}

document.addEventListener("DOMContentLoaded", start);
