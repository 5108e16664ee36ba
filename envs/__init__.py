"""Text environments (TextCraft, ALFWorld, WebShop) behind one gymnasium interface, and the group pool."""
