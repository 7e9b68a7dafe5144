"""The built-in tools as OpenAI function definitions (GET /agents-api/tools)."""

from __future__ import annotations

from typing import Any

NOTES = {
    "type": "function",
    "function": {
        "name": "notes",
        "description": (
            "Your scratchpad for the current topic. '$set' appends an entry (decisions are "
            "logged as they happen, never overwritten); 'read' returns the notes of the "
            "current topic or of another topic of this session by id; 'update' replaces the "
            "whole content when your understanding has changed."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "op": {"type": "string", "enum": ["$set", "read", "update"]},
                "content": {"type": "string", "description": "For $set and update."},
                "topicId": {"type": "string", "description": "For read; default: current topic."},
            },
            "required": ["op"],
            "additionalProperties": False,
        },
    },
}

IMPORTANT_INFO = {
    "type": "function",
    "function": {
        "name": "important_info",
        "description": (
            "Durable facts about this user that must always be exactly right and always "
            "present (identity, configuration, standing decisions). Never summarized. "
            "'$set' creates or updates an entry by key, 'read' returns all or one key, "
            "'$unset' deletes a key."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "op": {"type": "string", "enum": ["$set", "read", "$unset"]},
                "key": {"type": "string"},
                "value": {"description": "For $set: any JSON value."},
            },
            "required": ["op"],
            "additionalProperties": False,
        },
    },
}

MANAGE_TOPIC_MEMORY = {
    "type": "function",
    "function": {
        "name": "manage_topic_memory",
        "description": (
            "Curate cross-session memory: 'promote' keeps a topic's summary in memory, "
            "'demote' removes it, 'deprecate' marks a reversed decision (its title stays "
            "as a [DEPRECATED] trace). A user's own choice cannot be overridden."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["promote", "demote", "deprecate"]},
                "topicId": {"type": "string"},
            },
            "required": ["action", "topicId"],
            "additionalProperties": False,
        },
    },
}

RECALL = {
    "type": "function",
    "function": {
        "name": "recall",
        "description": (
            "Look up what this user said or decided earlier, in any past session, when it is "
            "not in your context: older topics fade from it, only promoted ones stay. Use it "
            "when the user refers to something you do not see ('what did I tell you about "
            "X', 'like last time'), before asking them to repeat themselves. Returns the "
            "best-matching past topics and messages (title, snippet, topicId, date); topics "
            "the user marked wrong are left out."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    # The ranking weighs each word by its rarity: steer the model to the
                    # distinctive ones (shared/search/ranking.py).
                    "description": (
                        "The distinctive words to look for: names, places, things, as the "
                        "user would have said them. Any order; no operators."
                    ),
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "description": "Default 5.",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}

# Built-in tools come first in every tools list: the runtime dispatches them before MCP tools.
BUILT_IN_TOOLS: tuple[dict[str, Any], ...] = (NOTES, IMPORTANT_INFO, MANAGE_TOPIC_MEMORY, RECALL)
BUILT_IN_TOOL_NAMES = tuple(tool["function"]["name"] for tool in BUILT_IN_TOOLS)
