"""The watermark dashboard's code: rules and schema (pure) at the bottom, the Spark and Redis adapters
in the middle, the commands on top; the dashboard (``dashboard``) reads what they write."""
