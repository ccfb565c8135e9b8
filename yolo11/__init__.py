"""YOLO11 object detection trained with Hugging Face Accelerate."""
