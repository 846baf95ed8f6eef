// The copy buttons of pretty-printed JSON blocks: copy the block's text to the clipboard.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const text = button.parentElement.querySelector("pre").textContent;
  const done = (label) => {
    button.textContent = label;
    setTimeout(() => { button.textContent = "copy"; }, 1500);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(() => done("copied"), () => done("press Ctrl+C"));
  } else {
    const range = document.createRange();
    range.selectNodeContents(button.parentElement.querySelector("pre"));
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    done(document.execCommand && document.execCommand("copy") ? "copied" : "press Ctrl+C");
  }
});
