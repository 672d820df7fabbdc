// Whether the page's URL asks for the presentation view (?view=present). The toggle starts
// from it when the page loads, and so does the page script (present-page.js).
() => new URLSearchParams(window.location.search).get('view') === 'present'
