"""What heads look at (Clark et al. 2019, "What Does BERT Look At?"): per layer and head, the
average attention to [CLS], [SEP], punctuation, the token itself and the previous / next token,
over a set of texts; the heads that stand out open on the Attention page."""

import streamlit as st

from tfm.viz import encoder as encoder_figs
from ui import charts, needs, sidebar
from ui.encoder_panels import LOOK_KINDS as KINDS, SAMPLE_TEXTS
from ui.model_run import active_model
from ui.progress import progress_bar
from ui.text import head_label, message


def _open(layer: int, head: int) -> None:
    for name, value in (("layer", layer), ("head", head), ("mode", "head")):
        st.session_state[f"attn.{name}"] = st.session_state[f"keep.attn.{name}"] = value
    st.session_state["attn.view"] = "Pattern"


def standouts(look) -> None:
    """The three strongest heads of each kind, each a button that opens it on the Attention page."""
    st.subheader("Heads that stand out")
    cols = st.columns(len(KINDS))
    for col, kind in zip(cols, KINDS):
        col.markdown(f"**{kind}**")
        for layer, head, score in look.standouts(kind, 3):
            if col.button(
                f"{head_label(layer, head)}: {score:.2f}",
                key=f"look.{kind}.{layer}.{head}",
                on_click=_open,
                args=(layer, head),
            ):
                st.switch_page("pages/attention.py")


def main() -> None:
    sidebar.render()
    st.title("What heads look at")
    needs.encoder("What heads look at")
    run = active_model()
    st.caption(
        f"Clark et al. (2019) averaged BERT's attention over 1000 Wikipedia segments and found heads that put "
        f"most of it on [SEP], on [CLS], on punctuation, or on the previous or next token. Here: the same "
        f"averages for this model over {len(SAMPLE_TEXTS)} short texts (some are sentence pairs), each cell one "
        "head."
    )
    try:
        look = run.look_at(SAMPLE_TEXTS, progress=progress_bar("Reading every head's attention"))
    except ValueError as e:
        st.info(f"Nothing to measure on this model: {message(e)}.")
        st.stop()
    charts.show(
        encoder_figs.look_at_figure(
            look,
            KINDS,
            f"Average share of attention, {look.n_texts} texts, {look.n_tokens} tokens (rows: layers, columns: heads)",
        ),
        key="look.grid",
    )
    st.markdown("\n".join(f"- **{k}**: {encoder_figs.KIND_HELP[k]}" for k in KINDS))
    standouts(look)


main()
