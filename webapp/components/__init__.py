"""Rendering helpers shared by pages (they draw plain data; they never call services)."""
