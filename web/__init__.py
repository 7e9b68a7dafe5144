"""The thin Flask API: validate, write through one service call, enqueue."""
