"""The browser app shell: the page frame every workspace screen shares (switcher, sidebar)."""
