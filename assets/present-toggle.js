// The presentation toggle: the root's class (__ROOT_CLASS__) and the URL follow it, so that a
// reload stays in the mode it shows. Filled in by specviz.ui.present.
(on) => {
  document.documentElement.classList.toggle(__ROOT_CLASS__, Boolean(on));
  const url = new URL(window.location.href);
  url.searchParams.delete('view');
  if (on) url.searchParams.set('mode', 'present');
  else url.searchParams.delete('mode');
  window.history.replaceState(window.history.state, '', url);
}
