"""The built-in runtime tools (R8): notes, important_info, manage_topic_memory."""
