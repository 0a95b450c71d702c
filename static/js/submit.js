// The submit page: swap the editor's text for a chosen template, let Tab indent inside the editor, check
// the spec as the user types (POST /api/v1/spec/validate/, debounced: each field error with its path and
// line beside the editor), and complete field names from the spec's JSON Schema (Ctrl-Space, or typing a
// name at the start of a line), showing each field's description; after `key: `, a field's allowed values.
(function () {
  "use strict";
  const select = document.getElementById("template-select");
  const editor = document.getElementById("id_spec");
  const source = document.getElementById("template-texts");
  const codes = document.getElementById("template-codes");
  const templateField = document.getElementById("id_template");
  const codeNote = document.getElementById("template-code");
  if (!editor) return;
  let pristine = editor.value;
  if (select && source) {
    const texts = JSON.parse(source.textContent);
    select.addEventListener("change", function () {
      const text = texts[select.value];
      if (text === undefined) return;
      if (editor.value !== pristine && !window.confirm("Replace your edits with the template?")) return;
      editor.value = text;
      pristine = text;
      // The template's code (if it has a folder) is attached on submit when no ZIP is chosen.
      const folders = codes ? JSON.parse(codes.textContent) : {};
      if (templateField) templateField.value = select.value;
      if (codeNote) {
        codeNote.hidden = !(select.value in folders);
        const name = codeNote.querySelector("code");
        if (name) name.textContent = folders[select.value] || "";
      }
      editor.dispatchEvent(new Event("input"));
    });
  }

  const wrap = document.getElementById("spec-editor");
  const popup = document.getElementById("spec-complete");
  const live = document.getElementById("spec-live");
  const DEBOUNCE_MS = 400;
  let schema = null;
  let options = [];
  let chosen = 0;

  // ---- live check ----
  let timer = null;
  let sent = 0;
  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }
  function scheduleCheck() {
    if (!live || !wrap) return;
    window.clearTimeout(timer);
    timer = window.setTimeout(check, DEBOUNCE_MS);
  }
  function check() {
    const text = editor.value;
    const mine = ++sent;
    if (!text.trim()) {
      live.hidden = true;
      return;
    }
    fetch(wrap.dataset.validateUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/yaml", "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: text,
    })
      .then(function (response) { return response.json().then(function (body) { return [response.ok, body]; }); })
      .then(function (pair) { if (mine === sent) show(pair[0], pair[1]); })
      .catch(function () { /* offline or throttled: the submit button still checks */ });
  }
  function show(ok, body) {
    const status = live.querySelector(".spec-live-status");
    const list = live.querySelector(".field-errors");
    list.replaceChildren();
    live.hidden = false;
    if (!ok) {
      status.textContent = body.detail || "The spec could not be checked.";
      status.className = "spec-live-status small";
      return;
    }
    if (body.valid) {
      status.textContent = "Valid" + (body.source === "ffdl" ? " FfDL manifest." : " spec.") +
        " Submit or dry-run it to check the tenant's policy and the cluster too.";
      status.className = "spec-live-status small spec-live-ok";
      return;
    }
    status.textContent = "Not valid yet:";
    status.className = "spec-live-status small";
    Object.keys(body.errors).forEach(function (path) {
      body.errors[path].forEach(function (message) {
        const item = document.createElement("li");
        item.dataset.path = path;
        const code = document.createElement("code");
        code.className = "field";
        code.textContent = path;
        item.append(code, " " + message);
        const line = body.lines[path];
        if (line) {
          const link = document.createElement("a");
          link.href = "#id_spec";
          link.className = "spec-line";
          link.dataset.line = String(line);
          link.textContent = "line " + line;
          link.addEventListener("click", function (event) { event.preventDefault(); goToLine(line); });
          item.append(" (", link, ")");
        }
        list.append(item);
      });
    });
  }
  function goToLine(line) {
    const lines = editor.value.split("\n");
    let start = 0;
    for (let i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
    const end = start + (lines[line - 1] || "").length;
    editor.focus();
    editor.setSelectionRange(start, end);
    const height = parseFloat(getComputedStyle(editor).lineHeight) || 18;
    editor.scrollTop = Math.max(0, (line - 3) * height);
  }

  // ---- completion ----
  if (wrap) {
    fetch(wrap.dataset.schemaUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        schema = body;
        if (body) wrap.dataset.schemaReady = "1";
      })
      .catch(function () { schema = null; });
  }

  // What a line holds: its indentation, whether it starts a list item, and its key if it is `key:` alone.
  function parseLine(text) {
    if (!text.trim() || /^\s*#/.test(text)) return null;
    const m = /^( *)(- +)?(.*)$/.exec(text);
    const lead = m[1].length;
    const dash = Boolean(m[2]);
    const content = m[3];
    const open = /^([A-Za-z_][\w.-]*|"[^"]*"|'[^']*') *:\s*(#.*)?$/.exec(content);
    const key = /^([A-Za-z_][\w.-]*|"[^"]*"|'[^']*') *:/.exec(content);
    return {
      lead: lead,
      dash: dash,
      contentIndent: lead + (dash ? m[2].length : 0),
      openKey: open ? open[1].replace(/^["']|["']$/g, "") : null,
      key: key ? key[1].replace(/^["']|["']$/g, "") : null,
    };
  }

  // The object path (["volumes", "[]"]) a key typed at `row` with this indentation belongs to; null when
  // the text above cannot hold one there (a flow mapping, a scalar value).
  function objectPath(lines, row, before) {
    const m = /^( *)(- +)?/.exec(before);
    const segs = [];
    let cur = m[1].length + (m[2] ? m[2].length : 0);
    let needList = false;
    if (m[2]) { segs.unshift("[]"); needList = true; cur = m[1].length; }
    for (let r = row - 1; r >= 0; r--) {
      const info = parseLine(lines[r]);
      if (!info) continue;
      if (needList) {
        if (info.lead > cur || (info.lead === cur && info.dash)) continue;
        if (!info.openKey || info.contentIndent > cur) return null;
        segs.unshift(info.openKey);
        needList = false;
        cur = info.contentIndent;
        if (info.dash) { segs.unshift("[]"); needList = true; cur = info.lead; }
        continue;
      }
      if (info.dash && info.contentIndent === cur) { segs.unshift("[]"); needList = true; cur = info.lead; continue; }
      if (info.contentIndent >= cur) continue;
      if (!info.openKey) return null;
      segs.unshift(info.openKey);
      cur = info.contentIndent;
      if (info.dash) { segs.unshift("[]"); needList = true; cur = info.lead; }
    }
    return needList ? null : segs;
  }

  // The keys (with their values' text) in use in the object the caret's line is in: same indentation, same
  // block, same list item; none above a line that starts a new item.
  function siblingKeys(lines, row, indent, itemStart) {
    const used = new Map();
    for (const step of itemStart ? [1] : [-1, 1]) {
      for (let r = row + step; r >= 0 && r < lines.length; r += step) {
        const info = parseLine(lines[r]);
        if (!info) continue;
        if (info.contentIndent < indent) break;
        if (step === 1 && info.dash && info.lead < indent) break;  // the next item
        if (info.contentIndent === indent && info.key) {
          used.set(info.key, lines[r].slice(lines[r].indexOf(":") + 1).replace(/#.*$/, "").trim());
        }
        if (step === -1 && info.dash && info.contentIndent === indent) break;  // this item's first line
      }
    }
    return used;
  }

  function properties(node) {
    const found = [];
    if (!node) return found;
    Object.keys(node.properties || {}).forEach(function (name) {
      found.push({ name: name, node: node.properties[name], only: "" });
    });
    (node.allOf || []).forEach(function (rule) {
      if (!rule.then || !rule.then.properties || !rule.if) return;
      const cond = rule.if.properties || {};
      const which = Object.keys(cond).map(function (k) { return k + ": " + cond[k].const; }).join(", ");
      Object.keys(rule.then.properties).forEach(function (name) {
        if (!found.some(function (f) { return f.name === name && !f.only; })) {
          found.push({ name: name, node: rule.then.properties[name], only: which });
        }
      });
    });
    return found;
  }

  // Whether a variant's field ("type: s3") fits the object's own value of that key, when it has one.
  function fits(only, used) {
    if (!only) return true;
    return only.split(", ").every(function (cond) {
      const parts = cond.split(": ");
      const value = used.get(parts[0]);
      return value === undefined || value === "" || value.replace(/^["']|["']$/g, "") === parts[1];
    });
  }

  function nodeAt(segs) {
    let node = schema;
    for (const seg of segs) {
      if (!node) return null;
      if (seg === "[]") { node = node.items; continue; }
      const match = properties(node).find(function (p) { return p.name === seg; });
      if (match) node = match.node;
      else if (node.additionalProperties && typeof node.additionalProperties === "object") node = node.additionalProperties;
      else return null;
    }
    return node;
  }

  function typeText(node) {
    const types = [].concat(node.type || []).filter(function (t) { return t !== "null"; });
    if (node.enum) return node.enum.filter(function (v) { return v !== null; }).join(" | ");
    return types.join(" | ");
  }

  function caret() {
    const upto = editor.value.slice(0, editor.selectionStart);
    const lines = editor.value.split("\n");
    const row = upto.split("\n").length - 1;
    const before = upto.slice(upto.lastIndexOf("\n") + 1);
    return { lines: lines, row: row, before: before };
  }

  const VALUE = /^( *)(- +)?([A-Za-z_][\w.-]*): *([\w.-]*)$/;

  // After `key: `, a field with a few allowed values (volumes[].kind, tuning.threads) offers them.
  function openValues(at, explicit) {
    const m = VALUE.exec(at.before);
    if (!m || (!explicit && !m[4])) return close();
    const segs = objectPath(at.lines, at.row, m[1] + (m[2] || ""));
    const node = segs && nodeAt(segs);
    const prop = node && properties(node).find(function (p) { return p.name === m[3]; });
    const values = prop && prop.node.enum ? prop.node.enum.filter(function (v) { return v !== null; }) : [];
    options = values
      .filter(function (v) { return String(v).startsWith(m[4]) && String(v) !== m[4]; })
      .map(function (v) { return { name: String(v), node: { description: prop.node.description }, only: "", value: true }; });
    if (!options.length) return close();
    chosen = 0;
    render(segs, at.before.length - m[4].length, at.row);
  }

  function openCompletion(explicit) {
    if (!schema || !popup) return close();
    const at = caret();
    const word = /^( *)(- +)?([A-Za-z_][\w.-]*)?$/.exec(at.before);
    if (!word) return openValues(at, explicit);
    if (!explicit && !word[3]) return close();
    const segs = objectPath(at.lines, at.row, at.before);
    const node = segs && nodeAt(segs);
    if (!node) return close();
    const indent = word[1].length + (word[2] ? word[2].length : 0);
    const used = siblingKeys(at.lines, at.row, indent, Boolean(word[2]));
    const prefix = word[3] || "";
    options = properties(node).filter(function (p) {
      return p.name.startsWith(prefix) && p.name !== prefix && !used.has(p.name) && fits(p.only, used);
    });
    if (!options.length) return close();
    chosen = 0;
    render(segs, indent, at.row);
  }

  function render(segs, indent, row) {
    const list = popup.querySelector("ul");
    list.replaceChildren();
    options.forEach(function (option, index) {
      const item = document.createElement("li");
      item.setAttribute("role", "option");
      item.dataset.key = option.name;
      item.setAttribute("aria-selected", String(index === chosen));
      const name = document.createElement("code");
      name.textContent = option.name;
      const kind = document.createElement("span");
      kind.className = "muted";
      kind.textContent = option.value ? "value" : typeText(option.node) + (option.only ? " (" + option.only + ")" : "");
      item.append(name, kind);
      item.addEventListener("mousedown", function (event) { event.preventDefault(); chosen = index; accept(); });
      list.append(item);
    });
    popup.dataset.path = segs.join(".");
    const style = getComputedStyle(editor);
    const height = parseFloat(style.lineHeight) || 18;
    const top = editor.offsetTop + parseFloat(style.paddingTop) + (row + 1) * height - editor.scrollTop;
    popup.style.top = Math.min(top, editor.offsetTop + editor.clientHeight) + "px";
    popup.style.left = Math.min(indent * 7.8 + 12, editor.clientWidth - 260) + "px";
    popup.hidden = false;
    describe();
  }

  function describe() {
    popup.querySelectorAll("li").forEach(function (item, index) {
      item.setAttribute("aria-selected", String(index === chosen));
      if (index === chosen) item.scrollIntoView({ block: "nearest" });
    });
    const option = options[chosen];
    let text = option.node.description || "";
    if (option.node.default !== undefined) text += " Default: " + JSON.stringify(option.node.default) + ".";
    popup.querySelector(".complete-help").textContent = text;
  }

  function close() {
    if (popup) popup.hidden = true;
    options = [];
  }

  function accept() {
    const option = options[chosen];
    if (!option) return;
    const at = caret();
    if (option.value) {
      const typed = VALUE.exec(at.before)[4];
      editor.setRangeText(option.name, editor.selectionStart - typed.length, editor.selectionStart, "end");
      close();
      editor.dispatchEvent(new Event("input"));
      return;
    }
    const word = /^( *)(- +)?([A-Za-z_][\w.-]*)?$/.exec(at.before);
    const indent = word[1].length + (word[2] ? word[2].length : 0);
    const start = editor.selectionStart - (word[3] || "").length;
    const types = [].concat(option.node.type || []);
    const pad = " ".repeat(indent + 2);
    let text = option.name + ": ";
    if (types[0] === "object" && option.node.properties) text = option.name + ":\n" + pad;
    else if (types[0] === "array" && option.node.items && option.node.items.properties) text = option.name + ":\n" + pad + "- ";
    editor.setRangeText(text, start, editor.selectionStart, "end");
    close();
    editor.dispatchEvent(new Event("input"));
    if (text.endsWith("\n" + pad) || text.endsWith("- ")) openCompletion(true);
  }

  editor.addEventListener("keydown", function (event) {
    const open = popup && !popup.hidden && options.length;
    if (open && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
      event.preventDefault();
      chosen = (chosen + (event.key === "ArrowDown" ? 1 : options.length - 1)) % options.length;
      describe();
      return;
    }
    if (open && (event.key === "Enter" || event.key === "Tab")) {
      event.preventDefault();
      accept();
      return;
    }
    if (open && event.key === "Escape") {
      event.preventDefault();
      close();
      return;
    }
    if (event.ctrlKey && (event.key === " " || event.code === "Space")) {
      event.preventDefault();
      openCompletion(true);
      return;
    }
    if (event.key !== "Tab" || event.shiftKey || event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    const start = editor.selectionStart;
    editor.setRangeText("  ", start, editor.selectionEnd, "end");
  });
  editor.addEventListener("input", function (event) {
    scheduleCheck();
    if (event.isTrusted) openCompletion(false);
  });
  editor.addEventListener("blur", close);
  editor.addEventListener("click", close);
  scheduleCheck();
})();
