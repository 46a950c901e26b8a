"""Structured outputs (constrained decoding) through the official `openai` client: every output
on a set of schemas and prompts validates with a real JSON Schema validator (`jsonschema`), the
SDK's `beta.chat.completions.parse()` with a pydantic model works, regex / choice / grammar
outputs match, streaming and n > 1 are constrained per choice, the mask-cache counters on /metrics
move by the constrained steps, and what cannot be enforced is a 400 naming the field. One server
(module fixture) with the default model.
"""
from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
from conftest import WardenServer

# Bounded schemas: every string and array has a maximum, so a complete document always fits in
# MAX_TOKENS and each output must finish with "stop" and validate.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 24},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
PETS = {
    "type": "object",
    "properties": {
        "pets": {"type": "array", "maxItems": 3,
                 "items": {"type": "object",
                           "properties": {"kind": {"enum": ["cat", "dog", "fish"]},
                                          "legs": {"type": "integer"}},
                           "required": ["kind", "legs"], "additionalProperties": False}},
        "happy": {"type": "boolean"},
    },
    "required": ["pets", "happy"],
    "additionalProperties": False,
}
CODES = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
        "score": {"type": "number"},
        "note": {"anyOf": [{"type": "string", "maxLength": 16}, {"type": "null"}]},
    },
    "required": ["code", "score", "note"],
    "additionalProperties": False,
}
ORDER = {
    "$defs": {"item": {"type": "object",
                       "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
                                      "qty": {"type": "integer"}},
                       "required": ["sku", "qty"], "additionalProperties": False}},
    "type": "object",
    "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 2,
                             "items": {"$ref": "#/$defs/item"}},
                   "express": {"type": "boolean"}},
    "required": ["items", "express"],
    "additionalProperties": False,
}
CASES = [
    (PERSON, "Describe a fictional person as JSON."),
    (PERSON, "Give me the name and age of a famous scientist in JSON."),
    (PETS, "List the pets of a family as JSON."),
    (CODES, "Produce an airport code record as JSON."),
    (ORDER, "Write a shop order as JSON."),
]
MAX_TOKENS = 400


@pytest.fixture(scope="module")
def srv():
    s = WardenServer("--max-seqs", "32", "--kv-cache-bytes", "256M")
    yield s
    rc = s.stop()
    assert rc == 0, "".join(s.stderr_lines)[-2000:]


def chat(srv, prompt, **kw):
    kw.setdefault("max_tokens", MAX_TOKENS)
    return srv.client().chat.completions.create(
        model=srv.model_id, messages=[{"role": "user", "content": prompt}], **kw)


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}


def test_every_output_validates_against_its_schema(srv):
    # Greedy and sampled (n=2) for each case, all concurrently (the engine batches them).
    def run(case):
        schema, prompt = case
        greedy = chat(srv, prompt, temperature=0, response_format=schema_format(schema))
        sampled = chat(srv, prompt, temperature=1.0, seed=3, n=2,
                       response_format=schema_format(schema))
        return schema, greedy.choices + sampled.choices
    with ThreadPoolExecutor(len(CASES)) as ex:
        results = list(ex.map(run, CASES))
    for schema, choices in results:
        assert len(choices) == 3
        for ch in choices:
            assert ch.finish_reason == "stop", ch.message.content
            jsonschema.validate(json.loads(ch.message.content), schema)


def test_json_object_mode(srv):
    r = chat(srv, "Return a JSON object with a key 'answer' set to 42.", temperature=0,
             max_tokens=60, response_format={"type": "json_object"})
    ch = r.choices[0]
    if ch.finish_reason == "stop":
        assert isinstance(json.loads(ch.message.content), dict)
    else:  # ran out of tokens inside the object: still the start of one
        assert ch.message.content.startswith("{")


def test_sdk_parse_with_pydantic_model(srv):
    from pydantic import BaseModel, Field

    # Bounded (maxLength / maxItems in the schema the SDK sends) so the answer fits MAX_TOKENS.
    class Pet(BaseModel):
        kind: str = Field(max_length=12)
        legs: int

    class Answer(BaseModel):
        owner: str = Field(max_length=20)
        pets: list[Pet] = Field(max_length=2)
        adopted: bool

    c = srv.client()
    r = c.beta.chat.completions.parse(
        model=srv.model_id, temperature=0, max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": "Who owns which pets? Answer in JSON."}],
        response_format=Answer)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", msg.content
    assert isinstance(msg.parsed, Answer)
    assert Answer.model_validate_json(msg.content) == msg.parsed


def test_streamed_output_is_constrained(srv):
    stream = chat(srv, "Describe a fictional person as JSON.", temperature=0.8, seed=11, n=2,
                  stream=True, response_format=schema_format(PERSON))
    text = {0: "", 1: ""}
    finish = {}
    for chunk in stream:
        for ch in chunk.choices:
            text[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    assert finish == {0: "stop", 1: "stop"}
    for t in text.values():
        jsonschema.validate(json.loads(t), PERSON)


def test_mask_cache_metrics(srv):
    # top_p truncates the distribution, so every step of a constrained choice looks its mask up:
    # hits + misses move by the tokens sampled (the completion tokens, and the stop token that
    # ended the choice, which usage does not count).
    before = srv.metrics()
    r = chat(srv, "Describe a fictional person as JSON.", temperature=0.8, top_p=0.9, seed=5,
             response_format=schema_format(PERSON))
    after = srv.metrics()
    d = {k: after[k] - before.get(k, 0) for k in after if k.startswith("warden:structured_output_")}
    lookups = (d["warden:structured_output_mask_cache_hits_total"]
               + d["warden:structured_output_mask_cache_misses_total"])
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens <= lookups <= r.usage.completion_tokens + 1, (d, r.usage)
    assert (d["warden:structured_output_mask_compute_seconds_total"] > 0) == (
        d["warden:structured_output_mask_cache_misses_total"] > 0)


def test_guided_regex_choice_and_grammar(srv):
    pattern = r"[0-9]{3}-[0-9]{4}"
    r = chat(srv, "Give me a phone number.", temperature=0.7, seed=5, n=3,
             extra_body={"guided_regex": pattern})
    for ch in r.choices:
        assert re.fullmatch(pattern, ch.message.content), ch.message.content
        assert ch.finish_reason == "stop"

    choices = ["yes", "no", "maybe"]
    r = chat(srv, "Is the sky blue?", temperature=1.0, seed=1, n=4,
             extra_body={"guided_choice": choices})
    assert all(ch.message.content in choices for ch in r.choices)
    r = chat(srv, "Pick a color.", temperature=0,
             extra_body={"structured_outputs": {"choice": ["red", "green", "blue"]}})
    assert r.choices[0].message.content in ["red", "green", "blue"]

    gbnf = 'root ::= "The answer is " [0-9]+ "." | "I don\'t know."'
    r = chat(srv, "What is 6 times 7?", temperature=0.5, seed=2, n=2,
             extra_body={"guided_grammar": gbnf})
    for ch in r.choices:
        assert re.fullmatch(r"The answer is [0-9]+\.|I don't know\.", ch.message.content)


def test_completions_endpoint_and_json_schema_given_as_text(srv):
    c = srv.client()
    r = c.completions.create(model=srv.model_id, prompt="A person in JSON:", max_tokens=MAX_TOKENS,
                             temperature=0, extra_body={"guided_json": json.dumps(PERSON)})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), PERSON)


@pytest.mark.parametrize("extra,param,needle", [
    ({"response_format": schema_format({"type": "integer", "minimum": 0})},
     "response_format.json_schema.schema", "minimum"),
    ({"response_format": {"type": "xml"}}, "response_format.type", "json_schema"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "required"),
    ({"guided_regex": "(a)\\1"}, "guided_regex", "backreferences"),
    ({"guided_grammar": "root ::= missing"}, "guided_grammar", "missing"),
    ({"guided_choice": []}, "guided_choice", "non-empty"),
    ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs.whitespace_pattern",
     "not supported"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice", "only one"),
])
def test_what_cannot_be_enforced_is_refused(srv, extra, param, needle):
    body = {"model": srv.model_id, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with pytest.raises(openai.BadRequestError) as e:
        srv.client().chat.completions.create(**body, extra_body=extra)
    err = e.value.body
    assert err["param"] == param, err
    assert needle in err["message"], err
