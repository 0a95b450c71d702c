// The submit page: swap the editor's text for a chosen template, and let Tab indent inside the editor.
(function () {
  "use strict";
  const select = document.getElementById("template-select");
  const editor = document.getElementById("id_spec");
  const source = document.getElementById("template-texts");
  const codes = document.getElementById("template-codes");
  const chosen = document.getElementById("id_template");
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
      if (chosen) chosen.value = select.value;
      if (codeNote) {
        codeNote.hidden = !(select.value in folders);
        const name = codeNote.querySelector("code");
        if (name) name.textContent = folders[select.value] || "";
      }
    });
  }
  editor.addEventListener("keydown", function (event) {
    if (event.key !== "Tab" || event.shiftKey || event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    const start = editor.selectionStart;
    editor.setRangeText("  ", start, editor.selectionEnd, "end");
  });
})();
