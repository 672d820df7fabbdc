// After a click on a token (specviz.ui.inspector_tab): the decision panel beside the tokens
// (__PANEL__) is brought into sight where it is not wholly on screen, as on a phone, where it
// sits under the token view. The panel takes its new content a frame or more after the event
// ends, so it is measured once it has been drawn, and again a moment later. Runs in the
// browser only.
() => {
  const bring = () => {
    const panel = document.querySelector(__PANEL__);
    if (!panel) return;
    const box = panel.getBoundingClientRect();
    if (box.top >= 0 && box.bottom <= window.innerHeight) return;
    panel.scrollIntoView({block: box.height > window.innerHeight ? 'start' : 'nearest'});
  };
  requestAnimationFrame(() => requestAnimationFrame(bring));
  setTimeout(bring, 400);
}
