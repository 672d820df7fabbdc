"""Traces into HTML and Plotly figures, from stored numbers alone (no model call, no gradio):
the palette, the figures' one style, HTML markup, the figures of one run, of where its time
goes, across runs and of the distribution check, the round narration and the race replay."""
