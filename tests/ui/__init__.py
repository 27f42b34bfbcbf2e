"""The dashboard: every page under AppTest against Redis seeded by the real pipeline, and in Chromium.
"""
