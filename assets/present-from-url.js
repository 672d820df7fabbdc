// Whether the page's URL asks for presentation mode (?mode=present; ?view=present is the
// older spelling and still works). The toggle starts from it when the page loads, and so
// does the page script (present-page.js).
() => {
  const q = new URLSearchParams(window.location.search);
  return q.get('mode') === 'present' || q.get('view') === 'present';
}
