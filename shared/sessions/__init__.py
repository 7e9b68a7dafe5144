"""Sessions (conversations) and the messages posted to them."""
