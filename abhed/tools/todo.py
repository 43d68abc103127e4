"""todo (spec §9): a checklist with stable ids and exactly one item in progress at a time.

Calls merge by id: an item without an id is added (and given one), an item with an id updates only
the fields it names, items not named stay as they are. Every call is checked whole before anything
changes: an update that would leave two items in_progress is refused, naming both, and the list is
left as it was. The list is rendered live for the human and re-injected after compaction.
"""

from __future__ import annotations

from pydantic import Field

from abhed.common.traits import Traits
from abhed.common.errors import ToolError
from abhed.session.store import TodoItem, TodoStatus
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, ok

MAX_ITEMS = 100
CONTENT_CHARS = 500
MARKS = {"pending": "[ ]", "in_progress": "[>]", "done": "[x]"}


class TodoChange(ToolInput):
    id: str | None = Field(None, description="The item's id (t1, t2, ...) to update it; omit it to add a new item.")
    content: str | None = Field(None, description="What to do, one short sentence. Required for a new item.")
    status: TodoStatus | None = Field(None, description="pending, in_progress or done. New items default to pending.")


class TodoInput(ToolInput):
    items: list[TodoChange] | None = Field(
        None, description="Items to add (without id) or update (with id). Items not named stay as they are.")
    remove: list[str] | None = Field(None, description="Ids of items to delete.")


def render_todos(items: list[TodoItem]) -> str:
    if not items:
        return "Todos: [the list is empty]"
    done = sum(item.status == "done" for item in items)
    active = sum(item.status == "in_progress" for item in items)
    lines = [f"Todos: {done} of {len(items)} done, {active} in progress."]
    lines += [f"{MARKS[item.status]} {item.id} {item.content}" for item in items]
    if done == len(items):
        lines.append("[all items are done]")
    elif not active:
        lines.append("[no item is in_progress: set the one you start next to in_progress]")
    return "\n".join(lines)


def _label(item: TodoItem) -> str:
    content = item.content if len(item.content) <= 60 else item.content[:57] + "..."
    return f"{item.id} ({content})"


def _apply(items: list[TodoItem], args: TodoInput, next_id: int) -> tuple[list[TodoItem], int, list[str]]:
    """The new list, the next free id, and what changed in words; ToolError if any part is wrong."""
    by_id = {item.id: item.model_copy() for item in items}
    order = [item.id for item in items]
    known = ", ".join(order) or "none yet"
    changes: list[str] = []
    seen: set[str] = set()
    for number, change in enumerate(args.items or [], start=1):
        where = f"items[{number - 1}]"
        if change.content is not None and not change.content.strip():
            raise ToolError(f"{where}: `content` is empty. Say what to do in one short sentence.")
        if change.content is not None and len(change.content) > CONTENT_CHARS:
            raise ToolError(f"{where}: `content` has {len(change.content)} characters; keep each item under "
                            f"{CONTENT_CHARS}. Split it into several items.")
        if change.id is None:
            if change.content is None:
                raise ToolError(f"{where} has no id and no content. To add an item give its content; to update one "
                                f"give its id (the ids are: {known}).")
            added = TodoItem(id=f"t{next_id}", content=change.content.strip(), status=change.status or "pending")
            next_id += 1
            by_id[added.id] = added
            order.append(added.id)
            changes.append(f"added {added.id}" + (f" ({added.status})" if added.status != "pending" else ""))
            continue
        if change.id in seen:
            raise ToolError(f"{where}: {change.id} appears twice in this call. Name each item once.")
        seen.add(change.id)
        item = by_id.get(change.id)
        if item is None:
            raise ToolError(f"{where}: there is no todo item {change.id!r}; the ids are: {known}. Omit id to add a new "
                            "item.")
        if change.content is None and change.status is None:
            raise ToolError(f"{where} names {change.id} but changes nothing: give its new status or content.")
        if change.status is not None and change.status != item.status:
            changes.append(f"{item.id} {item.status} -> {change.status}")
            item.status = change.status
        if change.content is not None and change.content.strip() != item.content:
            changes.append(f"{item.id} reworded")
            item.content = change.content.strip()
    for item_id in args.remove or []:
        if item_id not in by_id:
            raise ToolError(f"remove: there is no todo item {item_id!r}; the ids are: {known}.")
        if item_id in seen:
            raise ToolError(f"{item_id} is both updated and removed in this call. Do one or the other.")
        del by_id[item_id]
        order.remove(item_id)
        changes.append(f"removed {item_id}")
    if len(order) > MAX_ITEMS:
        raise ToolError(f"The list would hold {len(order)} items; at most {MAX_ITEMS} are kept. Remove done items "
                        "or merge small ones.")
    return [by_id[item_id] for item_id in order], next_id, changes


def _one_in_progress(items: list[TodoItem]) -> None:
    active = [item for item in items if item.status == "in_progress"]
    if len(active) > 1:
        names = ", ".join(_label(item) for item in active[:-1]) + f" and {_label(active[-1])}"
        raise ToolError(
            f"Not changed: this update would leave {len(active)} items in_progress: {names}. Exactly one item may be "
            "in_progress at a time. In the same call, set the one you finished to done (or back to pending), then "
            "start the next.", in_progress=[item.id for item in active])


class TodoTool(Tool):
    name = "todo"
    description = ("Keep a checklist for multi-step work: add items (without id), update them by id (t1, t2, ...) "
                   "with status pending, in_progress or done, or remove them. Exactly one item may be in_progress. "
                   "The human watches this list, and it is kept when older conversation is summarised: call it "
                   "often, whenever you start or finish a step. Call it with no arguments to see the list.")
    Input = TodoInput
    # It changes no file, only the session's todo list (the loop shows it when it changed): approved
    # in every mode, but not run beside other calls.
    traits = Traits(reads_only=True)
    example = {"items": [{"id": "t1", "status": "done"}, {"id": "t2", "status": "in_progress"},
                         {"content": "Run the tests again"}]}

    def run(self, args: TodoInput, ctx: ToolContext) -> ToolResult:
        session = ctx.session
        with session.lock:
            state = session.state
            if not args.items and not args.remove:
                return ok(render_todos(state.todos), changed=False)
            items, next_id, changes = _apply(state.todos, args, state.next_todo_id)
            _one_in_progress(items)
            if not changes:
                return ok(f"Unchanged: the list already says this.\n{render_todos(state.todos)}", changed=False)
            state.todos, state.next_todo_id = items, next_id
        return ok(f"Updated: {'; '.join(changes)}.\n{render_todos(items)}", changed=True)
