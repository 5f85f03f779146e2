"""End-to-end structured output and function calling over loopback, against the real
blossom-server (CPU backend, fixture model) and blossom-gateway: JSON Schemas, regexes, GBNF
grammars and tool calls through OpenAI's `openai` package, Hugging Face's `text-generation`, the
project's Python gRPC client (the CLI's flags are in e2e_clients_test). The fixture model's
weights are random: the tests check that every output is in its grammar, not what it says.
"""
import json
import unittest

import blossom_client
import openai
import text_generation

import e2e_common
from e2e_common import API_KEY, MODEL, auth


def setUpModule():
    global SRV, GW
    SRV, GW = e2e_common.start_shared()


def tearDownModule():
    e2e_common.stop_shared()


# A schema whose every value is bounded, so that even the fixture model's random weights end the
# object within max_tokens.
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "born": {"type": "string", "format": "date"},
    "age": {"type": "integer"},
    "role": {"enum": ["admin", "user"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2}},
    "required": ["name", "born", "age", "role"]}


class StructuredOutputTest(unittest.TestCase):
    """JSON Schemas through every API: the output parses and follows the schema."""

    def setUp(self):
        self.client = openai.OpenAI(base_url=GW.url + "/v1", api_key=API_KEY, max_retries=0)

    def assertPerson(self, text):
        value = json.loads(text)
        self.assertIsInstance(value, dict, text)
        self.assertEqual(list(value)[:4], ["name", "born", "age", "role"], text)  # in order
        self.assertRegex(value["born"], r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$")
        self.assertLessEqual(set(value), set(PERSON["properties"]), text)
        self.assertIsInstance(value["name"], str)
        self.assertLessEqual(len(value["name"]), 8, text)
        self.assertIs(type(value["age"]), int, text)
        self.assertIn(value["role"], ["admin", "user"], text)
        for tag in value.get("tags", []):
            self.assertIsInstance(tag, str)
            self.assertLessEqual(len(tag), 4, text)
        self.assertLessEqual(len(value.get("tags", [])), 2, text)

    def test_openai_response_format_json_schema(self):
        r = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Who?"}], max_tokens=600, n=3,
            temperature=1.0, seed=3, response_format={
                "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
        for choice in r.choices:
            self.assertEqual(choice.finish_reason, "stop", choice.message.content)
            self.assertPerson(choice.message.content)

    def test_openai_sdk_parse_with_a_pydantic_model(self):
        """The SDK's structured-output helper: a Pydantic model as response_format (its strict
        JSON Schema), parsed back into the model."""
        import pydantic
        from typing import Literal

        class Member(pydantic.BaseModel):
            name: str = pydantic.Field(max_length=8)
            age: int
            role: Literal["admin", "user"]

        r = self.client.beta.chat.completions.parse(
            model=MODEL, messages=[{"role": "user", "content": "Who?"}], max_tokens=400,
            temperature=0.8, seed=11, response_format=Member)
        member = r.choices[0].message.parsed
        self.assertIsInstance(member, Member)
        self.assertLessEqual(len(member.name), 8)
        self.assertIn(member.role, ["admin", "user"])

    def test_json_object_and_a_streamed_guided_json(self):
        r = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Anything"}], max_tokens=200,
            temperature=0, response_format={"type": "json_object"})
        self.assertEqual(r.choices[0].finish_reason, "stop", r.choices[0].message.content)
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
        text, finish = "", None
        for chunk in self.client.completions.create(
                model=MODEL, prompt="Record:", max_tokens=600, temperature=0, stream=True,
                extra_body={"guided_json": PERSON,
                            "structured_outputs": {"disable_any_whitespace": True}}):
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(finish, "stop", text)
        self.assertPerson(text)
        self.assertNotIn(" ", text.replace(json.loads(text)["name"], ""))  # compact

    def test_tgi_grammar_and_grpc_json_schema(self):
        tgi = text_generation.Client(GW.url, headers=auth(), timeout=60)
        r = tgi.generate("Record:", max_new_tokens=600, do_sample=True, seed=9,
                         grammar=text_generation.types.Grammar(
                             type=text_generation.types.GrammarType.Json, value=PERSON))
        self.assertPerson(r.generated_text)
        with blossom_client.BlossomClient(SRV.grpc, timeout=60) as c:
            g = c.generate("Record:", max_new_tokens=600, temperature=0.7, seed=2,
                           json_schema=PERSON, json_compact=True)
            self.assertEqual(g.finish_reason, "eos_token", g.text)
            self.assertPerson(g.text)

    def test_a_schema_the_server_cannot_enforce_is_400_naming_it(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5,
                response_format={"type": "json_schema", "json_schema": {
                    "name": "s", "schema": {"type": "integer", "minimum": 0}}})
        self.assertEqual(cm.exception.param, "response_format")
        self.assertIn("'minimum' is not supported", cm.exception.message)
        with self.assertRaises(text_generation.errors.ValidationError) as tgi_error:
            text_generation.Client(GW.url, headers=auth(), timeout=30).generate(
                "x", max_new_tokens=4, grammar=text_generation.types.Grammar(
                    type=text_generation.types.GrammarType.Regex, value="(a)\\1"))
        self.assertIn("backreferences are not supported", str(tgi_error.exception))

    def test_tool_calls_with_the_openai_sdk(self):
        """Function calling by a named tool_choice and by "required", unary and streamed, and a
        follow-up turn carrying the call and its result."""
        weather = {"type": "function", "function": {
            "name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}}
        clock = {"type": "function", "function": {"name": "now"}}
        messages = [{"role": "user", "content": "Weather in Oslo?"}]
        r = self.client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=300, temperature=0.8, seed=2,
            tools=[weather, clock],
            tool_choice={"type": "function", "function": {"name": "get_weather"}})
        message = r.choices[0].message
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertIsNone(message.content)
        call = message.tool_calls[0]
        self.assertEqual(call.type, "function")
        self.assertEqual(call.function.name, "get_weather")
        arguments = json.loads(call.function.arguments)
        self.assertEqual(list(arguments), ["city", "unit"])
        self.assertIn(arguments["unit"], ["c", "f"])
        # The next turn: the call and its result in the history.
        follow = self.client.chat.completions.create(
            model=MODEL, max_tokens=4, temperature=0, messages=messages + [
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "-3 C"}])
        self.assertIsInstance(follow.choices[0].message.content, str)
        # "required": a list of calls of any of the tools.
        r = self.client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=400, temperature=0.8, seed=5,
            tools=[weather, clock], tool_choice="required")
        self.assertEqual(r.choices[0].finish_reason, "tool_calls",
                         r.choices[0].message.content)
        for call in r.choices[0].message.tool_calls:
            self.assertIn(call.function.name, ["get_weather", "now"])
            self.assertIsInstance(json.loads(call.function.arguments), dict)
        # Streamed: the SDK's chunks carry the call's header, then its argument pieces.
        name, pieces, finish = None, "", None
        for chunk in self.client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=300, temperature=0.8, seed=2,
                tools=[weather, clock], stream=True,
                tool_choice={"type": "function", "function": {"name": "get_weather"}}):
            choice = chunk.choices[0]
            for call in choice.delta.tool_calls or []:
                name = call.function.name or name
                pieces += call.function.arguments or ""
            finish = choice.finish_reason or finish
        self.assertEqual(name, "get_weather")
        self.assertEqual(json.loads(pieces), arguments)  # the same seed, the same call
        self.assertEqual(finish, "stop")
        # A parameter schema the server cannot enforce: the 400 names the tool's parameters.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=4, tools=[weather, {
                    "type": "function", "function": {"name": "count", "parameters": {
                        "type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}}],
                tool_choice={"type": "function", "function": {"name": "count"}})
        self.assertEqual(cm.exception.param, "tools[1].function.parameters")
        self.assertIn("'minimum' is not supported", cm.exception.message)
        # tool_choice "auto" (the default with tools) is a 400 naming it.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4,
                                                tools=[weather])
        self.assertEqual(cm.exception.param, "tool_choice")

    def test_regex_through_vllm_and_tgi(self):
        pattern = r"(yes|no), [0-9]{2,4} (apples|pears)\."
        for temperature in (0, 1.0):
            r = self.client.completions.create(model=MODEL, prompt="Answer:", max_tokens=40,
                                               temperature=temperature, seed=8,
                                               extra_body={"guided_regex": pattern})
            self.assertRegex(r.choices[0].text, "^" + pattern + "$")
            self.assertEqual(r.choices[0].finish_reason, "stop")
        tgi = text_generation.Client(GW.url, headers=auth(), timeout=60)
        r = tgi.generate("Answer:", max_new_tokens=40, do_sample=True, seed=4,
                         grammar=text_generation.types.Grammar(
                             type=text_generation.types.GrammarType.Regex, value=pattern))
        self.assertRegex(r.generated_text, "^" + pattern + "$")

    def test_gbnf_grammar_through_vllm_fields(self):
        # Nested brackets, bounded so that random weights finish within max_tokens.
        grammar = """
            root ::= "(" expr ")"
            expr ::= term ([+*] term){0,3}
            term ::= [0-9]{1,2} | "(" expr ")"
        """
        for temperature, extra in ((0, {"guided_grammar": grammar}),
                                   (1.0, {"structured_outputs": {"grammar": grammar}})):
            r = self.client.completions.create(model=MODEL, prompt="Sum:", max_tokens=60,
                                               temperature=temperature, seed=5, extra_body=extra)
            text = r.choices[0].text
            self.assertEqual(r.choices[0].finish_reason, "stop", text)
            # A whole root: only its characters, and Python evaluates it (the grammar is a part
            # of Python's syntax), so the brackets balance.
            self.assertRegex(text, r"^\([()0-9+*]+\)$")
            self.assertIsInstance(eval(text, {"__builtins__": {}}), int, text)
        # Streamed on the chat route, the chunks concatenate to a text of the grammar too.
        stream = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Sum?"}], max_tokens=60,
            temperature=0, stream=True, extra_body={"guided_grammar": grammar})
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        self.assertRegex(text, r"^\([()0-9+*]*$")
        # A grammar the matcher cannot read is a 400 naming the field and the rule.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(
                model=MODEL, prompt="x", max_tokens=4,
                extra_body={"guided_grammar": "root ::= expr\nexpr ::= expr \"+\" [0-9] | [0-9]"})
        self.assertEqual(cm.exception.param, "guided_grammar")
        self.assertIn("rule 'expr' is left-recursive", cm.exception.message)



if __name__ == "__main__":
    unittest.main()
