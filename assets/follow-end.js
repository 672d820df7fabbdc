// js_on_load of the token view and the round table, after the pick script: each new value
// (a live frame, a Step, a whole Run at once) leaves the view scrolled to its end, where the
// newest tokens and the newest round are; a view that does not overflow is left as it is.
watch('value', () => {
  const box = element.closest('.html-container') || element;
  if (box.scrollHeight > box.clientHeight) box.scrollTop = box.scrollHeight;
});
