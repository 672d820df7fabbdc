// Previous or Next of the guided lesson (specviz.ui.lesson_panel), in the browser at once:
// the step's index the page holds (the hidden number a press of the step's button sends)
// moves by __BY__ within 0 .. __LAST__ before the server is asked to show that step, so that
// a press that follows, however soon and however busy the server, carries out the step the
// visitor moved to.
(index) => Math.max(0, Math.min(__LAST__, (Number(index) || 0) + __BY__))
