"""The closing sections of a model card: uses and limitations (a short neutral template the people releasing the
model complete), the compute estimate, and how to load the model."""

from __future__ import annotations

from bloomtrain.card.compute import estimate
from bloomtrain.card.markdown import note, table
from bloomtrain.card.records import CardRecords


def uses_and_limitations(r: CardRecords) -> str:
    seen = f" It saw {r.provenance.training.consumed_tokens:,} tokens in training." if r.provenance.training else ""
    return "\n\n".join([
        "## Uses and limitations",
        "*A starting point written by `bloomtrain model-card`: the people who release this model should complete "
        "it.*",
        "- **Intended use.** Research on language models: text generation and continuation in the languages of "
        "its training data, and a base model to fine-tune.\n"
        "- **Out of scope.** Decisions about people, high-stakes settings, and any use that relies on generated "
        "text being true.\n"
        f"- **Limitations.** The model reproduces the content and the biases of its training data and can "
        f"produce text that is wrong, offensive or personal.{seen} Its quality in a language follows that "
        "language's share of the data (Training data) and its scores (Evaluation).\n"
        "- **Downstream models.** As BLOOM's card asks, models trained or fine-tuned from this one should carry "
        "an updated model card."])


def compute_section(r: CardRecords) -> str:
    card = r.provenance.card
    est = estimate(r.launches, card)
    if est is None:
        return note("compute", "the run recorded no launch times, so device-hours are not estimated")
    rows = [("training loop wall time", f"{est.wall_seconds / 3600:.3f} h over {est.launches} launch(es)"),
            *((unit, f"{hours:.3f}") for unit, hours in est.hours.items())]
    notes = []
    if est.energy_kwh is None:
        notes.append(note("energy and emissions", "no power figure was given (set `power_watts`, and "
                          "`carbon_intensity` for emissions)"))
    else:
        rows.append(("energy", f"{est.energy_kwh:.4f} kWh (at {card.power_watts:g} W per GPU or core, as given)"))
        if est.emissions_kg is None:
            notes.append(note("emissions", "no carbon intensity was given (set `carbon_intensity`, kg CO2eq per kWh)"))
        else:
            rows.append(("emissions", f"{est.emissions_kg:.4f} kg CO2eq (at {card.carbon_intensity:g} kg CO2eq/kWh, "
                                      "as given)"))
    return "\n\n".join(["## Compute", "From the run's launch records: wall time of each launch's training loop x its "
                         "GPUs (CPU runs: processes x threads). Start-up and the final save are not counted.",
                         table(["", ""], rows, 2), *notes])


def how_to_load(r: CardRecords, name: str) -> str:
    if r.provenance.export is None:
        return "## How to load\n\nThis card describes a bloomtrain checkpoint: export it to transformers first,\n\n" \
               f"```bash\nbloomtrain export {r.provenance.checkpoint} OUT_DIR\n```"
    code = ("from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'model_id = "{name}"  # its Hub repository, or the path of the folder holding this card\n'
            "tokenizer = AutoTokenizer.from_pretrained(model_id)\n"
            "model = AutoModelForCausalLM.from_pretrained(model_id)\n"
            'inputs = tokenizer("The city", return_tensors="pt")\n'
            "print(tokenizer.decode(model.generate(**inputs, max_new_tokens=20)[0]))")
    return f"## How to load\n\n```python\n{code}\n```"
