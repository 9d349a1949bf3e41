"""tfm: see inside a transformer. Run with `streamlit run app.py`."""
from pathlib import Path

import streamlit as st

st.set_page_config(page_title="tfm: see inside a transformer", page_icon="🔍", layout="wide")

ROOT = Path(__file__).resolve().parent
# (file, title) by section; a page's URL path is its file stem (/attention, /next_token), the
# same name Streamlit's pages/ folder convention gives it, so a link works as a first request.
SECTIONS = {
    "Start": [("home.py", "Home")],
    "Look inside": [
        ("tokens.py", "Tokens"),
        ("attention.py", "Attention"),
        ("positions.py", "Positional encodings"),
        ("norms.py", "LayerNorm & residual stream"),
        ("shapes.py", "Shapes & parameters"),
        ("logit_lens.py", "Logit lens"),
    ],
    "Generate": [
        ("next_token.py", "Next-token sampling"),
        ("generate.py", "Generation & timeline"),
    ],
    "The 2017 Transformer": [
        ("encdec.py", "Encoder-decoder, trained live"),
        ("experiments.py", "Experiments"),
    ],
}
pages = {
    section: [st.Page(f"pages/{f}", title=t, url_path=Path(f).stem, default=(f == "home.py"))
              for f, t in entries if (ROOT / "pages" / f).is_file()]
    for section, entries in SECTIONS.items()
}
nav = st.navigation({s: p for s, p in pages.items() if p})
# Each page draws the shared sidebar itself (ui.sidebar.render), so it also runs standalone.
nav.run()
