#!/bin/bash
echo "hello from t1flow" > /app/greeting.txt
