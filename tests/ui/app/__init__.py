"""Every dashboard page under Streamlit's AppTest, against a real Redis seeded by the real pipeline."""
