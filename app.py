"""tfm: see inside a transformer. Run with `streamlit run app.py`."""
from pathlib import Path

import streamlit as st

from ui import server
from ui.text import message
from ui.nav import pages

st.set_page_config(page_title="tfm: see inside a transformer", page_icon="🔍", layout="wide")
try:  # the owner's flags (`python -m ui.server --help`) and TFM_* environment variables
    server.settings()
except ValueError as e:
    st.error(f"The server's settings are wrong: {message(e)}")
    st.stop()

nav = st.navigation(pages(Path(__file__).resolve().parent), expanded=True)  # every page listed: no "View more"
st.session_state["app.page"] = nav.url_path or "home"   # a class room's moment names its page (ui/rooms/live.py)
# Each page draws the shared sidebar itself (ui.sidebar.render), so it also runs standalone.
nav.run()
