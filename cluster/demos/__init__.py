"""`raybroker demo`: the main job on an embedded Ray, broker and Spark, printed step by step."""
