"""tfm: see inside a transformer. Run with `streamlit run app.py`."""

from pathlib import Path

import streamlit as st

from services import server
from ui import st_private
from ui.text import message
from ui.nav import pages
from ui.rooms import live, warm

WARM_OFF = (
    "Class warm-up is off on this server (TFM_ROOMS_WARM=off): a view you push is computed on the "
    "server's other processes when a student there first opens it, so those students wait longer."
)

st.set_page_config(page_title="tfm: see inside a transformer", page_icon="🔍", layout="wide")
try:  # the owner's flags (`python -m services.server --help`) and TFM_* environment variables
    server.settings()
    warm.enabled()  # TFM_ROOMS_WARM=off: class rooms without the warm-up (docs/class.md)
except ValueError as e:
    st.error(f"The server's settings are wrong: {message(e)}")
    st.stop()

# Every page listed (no "View more"), in the sidebar; config.toml hides the file-stem list Streamlit
# would show until this line runs on a fresh server (ui.st_private.navigation).
nav = st_private.navigation(pages(Path(__file__).resolve().parent), expanded=True)
page = nav.url_path or "home"
# A page's first run since another: its widgets are new to the browser, so ui.links.put writes them.
st.session_state["app.arrived"] = st.session_state.get("app.page") != page
st.session_state["app.page"] = page  # a class room's moment names its page (ui/rooms/live.py)
if live.role() == "teacher" and not warm.enabled():
    st.sidebar.caption(WARM_OFF)
# Each page draws the shared sidebar itself (ui.sidebar.render), so it also runs standalone.
nav.run()
