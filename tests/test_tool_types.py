"""Tool parameters typed as dataclasses, attrs classes, TypedDicts, enums and pydantic models."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
from typing import Any, TypedDict

import attrs
import pytest

from orchestrator import AssistantMessage, ScriptedModel, ToolArgumentsError, ToolCall, ToolMessage, create_agent, tool
from orchestrator.tools import convert, schema_for


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


@dataclasses.dataclass
class Item:
    """One line of an order."""

    name: str
    quantity: int
    size: Size = Size.SMALL

    def __post_init__(self) -> None:
        if self.quantity < 1:
            raise ValueError("quantity must be at least 1")


@attrs.frozen
class Address:
    street: str
    city: str
    floor: int | None = None


class Note(TypedDict, total=False):
    text: str
    urgent: bool


@dataclasses.dataclass
class Order:
    items: list[Item]
    address: Address
    notes: list[Note] = dataclasses.field(default_factory=list)


ledger: list[Order] = []


@tool
def place_order(order: Order, express: bool = False) -> str:
    """Place an order.

    Args:
        order: what to deliver and where
    """
    ledger.append(order)
    return f"{sum(item.quantity for item in order.items)} items to {order.address.city}"


ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "quantity": {"type": "integer"},
        "size": {"enum": ["small", "large"]},
    },
    "required": ["name", "quantity"],
    "additionalProperties": False,
    "description": "One line of an order.",
}


def test_a_structured_parameter_gets_a_nested_json_schema() -> None:
    order = place_order.parameters["properties"]["order"]
    assert order["description"] == "what to deliver and where"
    assert order["required"] == ["items", "address"]
    assert order["properties"]["items"] == {"type": "array", "items": ITEM_SCHEMA}
    assert order["properties"]["address"]["properties"]["floor"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert order["properties"]["notes"]["items"] == {
        "type": "object",
        "properties": {"text": {"type": "string"}, "urgent": {"type": "boolean"}},
        "required": [],
        "additionalProperties": False,
    }
    assert place_order.types == {"order": Order}


async def test_arguments_become_the_declared_types_before_the_handler_runs() -> None:
    ledger.clear()
    arguments = {
        "order": {
            "items": [{"name": "tea", "quantity": 2, "size": "large"}, {"name": "cup", "quantity": 1}],
            "address": {"street": "1 Main St", "city": "Lyon"},
            "notes": [{"text": "ring twice"}],
        }
    }
    assert await place_order.invoke(arguments, {}) == "3 items to Lyon"
    assert ledger == [
        Order(
            items=[Item("tea", 2, Size.LARGE), Item("cup", 1)],
            address=Address("1 Main St", "Lyon"),
            notes=[{"text": "ring twice"}],
        )
    ]


@pytest.mark.parametrize(
    ("order", "field", "message"),
    [
        ({"items": [], "address": {"street": "s"}}, "order.address", "missing required field(s): city"),
        (
            {"items": [{"name": "tea", "quantity": "two"}], "address": {"street": "s", "city": "c"}},
            "order.items[0].quantity",
            "expected an integer, got 'two'",
        ),
        (
            {"items": [{"name": "tea", "quantity": 1, "size": "huge"}], "address": {"street": "s", "city": "c"}},
            "order.items[0].size",
            "'huge' is not one of ['small', 'large']",
        ),
        (
            {"items": [{"name": "tea", "quantity": 0}], "address": {"street": "s", "city": "c"}},
            "order.items[0]",
            "Item refused the values: quantity must be at least 1",
        ),
        ({"items": [], "address": {"street": "s", "city": "c", "zip": 1}}, "order.address", "unknown field(s): zip"),
    ],
)
async def test_arguments_that_do_not_fit_name_their_field_and_why(
    order: dict[str, Any], field: str, message: str
) -> None:
    ledger.clear()
    with pytest.raises(ToolArgumentsError) as refused:
        await place_order.invoke({"order": order}, {})
    assert refused.value.field == field
    assert str(refused.value) == f"{field}: {message}"
    assert ledger == []


async def test_the_model_sees_a_failed_result_naming_the_field_and_can_correct_itself() -> None:
    ledger.clear()
    bad = {"order": {"items": [{"name": "tea", "quantity": "two"}], "address": {"street": "s", "city": "Oslo"}}}
    good = {"order": {"items": [{"name": "tea", "quantity": 2}], "address": {"street": "s", "city": "Oslo"}}}
    model = ScriptedModel(
        [
            AssistantMessage("", (ToolCall("c1", "place_order", bad),)),
            AssistantMessage("", (ToolCall("c2", "place_order", good),)),
            AssistantMessage("ordered"),
        ]
    )
    client = await create_agent(model, tools=[place_order])
    answer = await client.run("two teas to Oslo")
    assert answer.content == "ordered"
    results = [m for m in model.requests[2].messages if isinstance(m, ToolMessage)]
    assert [(m.status.value, m.content) for m in results] == [
        ("failed", "invalid arguments for place_order: order.items[0].quantity: expected an integer, got 'two'"),
        ("succeeded", "2 items to Oslo"),
    ]
    assert ledger == [Order(items=[Item("tea", 2)], address=Address("s", "Oslo"))]


def test_plain_parameters_need_no_conversion_and_tuples_floats_and_enums_do() -> None:
    @tool
    def plain(a: str, b: int, c: list[str], d: dict[str, int] | None = None) -> None:
        """Plain."""

    @tool
    def typed(a: float, b: tuple[int, int], c: list[Size]) -> None:
        """Typed."""

    assert plain.types == {}
    assert typed.types == {"a": float, "b": tuple[int, int], "c": list[Size]}
    assert convert(tuple[int, int], [1, 2]) == (1, 2)
    assert convert(float, 2) == 2.0 and isinstance(convert(float, 2), float)
    assert convert(list[Size], ["large"]) == [Size.LARGE]


def test_a_recursive_type_is_refused_when_the_tool_is_defined() -> None:
    @dataclasses.dataclass
    class Tree:
        children: list[Tree]

    globals()["Tree"] = Tree
    with pytest.raises(TypeError, match="parameter 'tree': no JSON schema for the recursive type"):

        @tool
        def walk(tree: Tree) -> None:
            """Walk."""


async def test_pydantic_models_are_a_parameter_type_when_pydantic_is_installed() -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is not installed")

    class Point(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        x: int
        y: int = 0

    class Path(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        points: list[Point]

    globals().update(Point=Point, Path=Path)
    seen: list[Any] = []

    @tool
    def draw(path: Path) -> str:
        """Draw a path."""
        seen.append(path)
        return "drawn"

    schema = draw.parameters["properties"]["path"]
    assert "$ref" not in str(schema) and "$defs" not in schema
    assert schema["properties"]["points"]["items"]["properties"]["x"]["type"] == "integer"
    assert await draw.invoke({"path": {"points": [{"x": 1}, {"x": 2, "y": 3}]}}, {}) == "drawn"
    assert seen == [Path(points=[Point(x=1), Point(x=2, y=3)])]
    with pytest.raises(ToolArgumentsError) as refused:
        await draw.invoke({"path": {"points": [{"x": "one"}]}}, {})
    assert refused.value.field == "path.points[0].x"
    assert str(refused.value) == "path.points[0].x: expected an integer, got 'one'"


def test_schema_for_never_imports_pydantic() -> None:
    code = (
        "import sys, dataclasses, orchestrator\n"
        "from orchestrator.tools import schema_for, convert\n"
        "@dataclasses.dataclass\n"
        "class A:\n"
        "    x: int\n"
        "schema_for(A); convert(A, {'x': 1})\n"
        "print('pydantic' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def test_schema_for_a_plain_type_is_unchanged() -> None:
    assert schema_for(list[str] | None) == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
