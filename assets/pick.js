// js_on_load of the token view and the tree drawing: a click (or Enter, or Space) on a token
// or a tree node selects it and sends it to Python. A tree node sends its round and node
// index; a token (in the token view, or the token a tree round added) its round and output
// position.
const pick = (e) => {
  const s = e.target.closest('[data-node], [data-pos]');
  if (!s || !element.contains(s)) return;
  element.querySelectorAll('.sv-selected').forEach((x) => x.classList.remove('sv-selected'));
  s.classList.add('sv-selected');
  const d = s.dataset;
  trigger('click', d.node !== undefined
    ? {round: Number(d.round), node: Number(d.node)}
    : {round: Number(d.round), pos: Number(d.pos)});
};
element.addEventListener('click', pick);
element.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') pick(e); });
