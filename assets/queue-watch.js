// Run once when the page loads (with the presentation script, launch(js=...)): no Run is lost
// without a word. A pressed Run is remembered (sessionStorage, so that a reload sees it) until
// the server answers it; where it never will, one line under the status says why:
// - the queue's stream ended without the server closing it (a proxy or the server dropped the
//   connection): the server has let the queued Run go, and this page still counts it as
//   pending, so Run stays dead until a reload;
// - the stream broke (gradio reconnects by drawing the page again) or the page was reloaded;
// - the queue was full, or the Run was refused before it started (the toast's words, kept).
// Filled in by specviz.ui.queue_watch.
() => {
  const KEY = __KEY__;
  const NOTE = __NOTE_ID__;
  const TEXT = __TEXT__;
  const w = window;
  const get = () => {
    try {
      return JSON.parse(sessionStorage.getItem(KEY) || 'null');
    } catch (e) {
      return null;
    }
  };
  const put = (run) => {
    try {
      if (run) sessionStorage.setItem(KEY, JSON.stringify(run));
      else sessionStorage.removeItem(KEY);
    } catch (e) {}
  };
  const status = () => document.getElementById('sv-status');
  const line = (el) => (el && el.querySelector('.html-container .sv-status')) || null;
  const tracker = (el) => (el && el.querySelector('[data-testid=status-tracker]')) || null;
  const note = (text) => {
    const el = status();
    if (!el) return false;
    let n = document.getElementById(NOTE);
    if (!n) {
      n = document.createElement('div');
      n.id = NOTE;
      n.className = 'sv-status sv-status-error';
      n.setAttribute('role', 'alert');
      el.after(n);
    }
    n.textContent = text;
    return true;
  };
  const lost = (why) => {
    if (get() && note(TEXT[why])) put(null);
  };
  // a reloaded page (or one drawn again after a broken stream, below) whose Run never ended
  const run0 = get();
  if (run0) {
    run0.reload = true;
    put(run0);
  }
  // the status element the page showed when the stream broke
  let drawn = null;
  const check = () => {
    const run = get();
    if (!run) return;
    const el = status();
    if (!el) return;
    if (run.reload || (drawn && el !== drawn)) {
      drawn = null;
      return lost('reload');
    }
    const t = tracker(el);
    const l = line(el);
    const waiting = !!t && !t.classList.contains('hide') && !t.querySelector('.error');
    if (l && l.classList.contains('sv-status-busy') && waiting && !t.innerText.includes('queue')) {
      // the Run is being served
      if (!run.seen) put({ ...run, seen: true });
      return;
    }
    const toast = [...document.querySelectorAll('.toast-body')]
      .map((b) => b.innerText.split('\n').map((s) => s.trim()))
      .flat()
      .filter((s) => s && s !== 'Error' && s !== '\u00d7')
      .pop();
    if (t && t.querySelector('.error') && !run.seen) {
      // refused before it started: the queue was full, or the controls were not valid (the
      // toast that says which may come a moment after the badge)
      if (!toast && Date.now() - run.at < 3000) return void setTimeout(check, 500);
      const full = toast && toast.includes('currently busy');
      if (note(full ? TEXT.full : toast ? TEXT.refused + toast : TEXT.refused + TEXT.error))
        put(null);
      return;
    }
    // answered
    if (!waiting && (run.seen || (l && l.innerText !== run.line))) put(null);
  };
  const start = (e) => {
    const b = e.target instanceof Element ? e.target.closest('#sv-run') : null;
    if (!b) return;
    const n = document.getElementById(NOTE);
    if (n) n.remove();
    const l = line(status());
    put({ at: Date.now(), seen: false, line: l ? l.innerText : '' });
  };
  document.addEventListener('click', start, true);
  new MutationObserver(check).observe(document.body, {
    childList: true,
    subtree: true,
    characterData: true,
    attributes: true,
    attributeFilter: ['class'],
  });
  // the queue's stream, read beside gradio's client: its end without a close_stream message
  // (the server sends one when the session's last event is answered) leaves a Run unanswered
  const fetch0 = w.fetch.bind(w);
  w.fetch = async (...args) => {
    const res = await fetch0(...args);
    const req = args[0];
    const url = typeof req === 'string' ? req : (req && req.url) || String(req);
    if (!url.includes('/queue/data') || !res.body) return res;
    const [mine, theirs] = res.body.tee();
    (async () => {
      const reader = mine.getReader();
      const text = new TextDecoder();
      let seen = '';
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          seen = (seen + text.decode(value, { stream: true })).slice(-4096);
          if (seen.includes('close_stream')) return;
        }
      } catch (err) {
        // gradio draws the page again: check() notes it then
        drawn = status();
        return;
      }
      lost('closed');
    })();
    const { status: code, statusText, headers } = res;
    return new Response(theirs, { status: code, statusText, headers });
  };
  check();
}
