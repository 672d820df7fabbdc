// The presentation toggle: the root's class (__ROOT_CLASS__) and the URL follow it, so that a
// reload stays in the view it shows. Filled in by specviz.ui.present.
(on) => {
  document.documentElement.classList.toggle(__ROOT_CLASS__, Boolean(on));
  const url = new URL(window.location.href);
  if (on) url.searchParams.set('view', 'present');
  else url.searchParams.delete('view');
  window.history.replaceState(window.history.state, '', url);
}
