#!/bin/sh
# Runs the app examples (examples/*.c, built into BUILD/examples/) on stories260K and checks
# what each one promises. make test copies this file into BUILD/tests/ and runs it with sh;
# the examples are found from there. TEST_RUNNER (qemu-aarch64 for make test-arm) runs them.
# Needs $LLMM_SHARED/models/stories260K.gguf and the golden continuation beside it.
bin=$(dirname "$0")/../examples
shared=${LLMM_SHARED:-../shared}
model=$shared/models/stories260K.gguf
golden=$shared/golden/stories260K/stories260K.f32.once.json
run=${TEST_RUNNER:-}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0

if [ ! -f "$model" ] || [ ! -f "$golden" ]; then
    echo "test_examples: SKIPPED: no $model or $golden (set LLMM_SHARED)"
    exit 0
fi

check() { # check NAME CONDITION...: counts and reports a failed condition
    name=$1
    shift
    if "$@"; then echo "[ OK ] $name"; else echo "[FAIL] $name"; failures=$((failures + 1)); fi
}

# ---- simple: the reference engine's greedy continuation, byte for byte
$run "$bin/simple" "$model" "Once upon a time" 64 > "$tmp/simple.out"
check "simple exits 0" [ $? -eq 0 ]
printf 'Once upon a time%b\n' "$(sed -n 's/.*"generated_text": *"\([^"]*\)".*/\1/p' "$golden")" > "$tmp/golden.txt"
check "simple prints the golden continuation" cmp -s "$tmp/simple.out" "$tmp/golden.txt"
$run "$bin/simple" "$tmp/missing.gguf" > /dev/null 2> "$tmp/simple.err"
check "simple fails on a missing model with a message" [ $? -eq 1 -a -s "$tmp/simple.err" ]

# ---- parallel: four conversations batched in one context give each one's text alone
$run "$bin/parallel" "$model" --temp 0 -n 40 > "$tmp/parallel.out" 2> "$tmp/parallel.err"
check "parallel exits 0" [ $? -eq 0 ]
i=0
for prompt in "Once upon a time" "The little dog" "Tom and Sue went to the park" "One day, a cat"; do
    awk -v want="--- conversation $i ---" '/^--- conversation [0-9]+ ---$/ {on = ($0 == want); next} on' \
        "$tmp/parallel.out" > "$tmp/parallel.$i"
    $run "$bin/simple" "$model" "$prompt" 40 > "$tmp/alone.$i"
    check "parallel conversation $i equals its text generated alone" cmp -s "$tmp/parallel.$i" "$tmp/alone.$i"
    i=$((i + 1))
done

# ---- chat: turns after the first reuse the KV cache and prefill only the new tokens
printf 'Hello there\nTell me a story about a dog\n\nWhat happened next?\n' |
    $run "$bin/chat" "$model" --template chatml -n 24 > "$tmp/chat.out" 2> "$tmp/chat.err"
check "chat exits 0" [ $? -eq 0 ]
check "chat answers three turns" [ "$(grep -c '^\[turn [0-9]*:' "$tmp/chat.err")" -eq 3 ]
# [turn T: R tokens reused from the KV cache, P prefilled, N in the conversation]
check "chat prefills the whole first turn" \
    awk '/^\[turn 1:/ { ok = ($3 == 0 && $10 == $12) } END { exit !ok }' "$tmp/chat.err"
check "chat reuses the KV of earlier turns and prefills the rest" \
    awk '/^\[turn [23]:/ { n++; if ($3 > 0 && $10 > 0 && $3 + $10 == $12) ok++ } END { exit !(n == 2 && ok == 2) }' \
    "$tmp/chat.err"
echo hi | $run "$bin/chat" "$model" > /dev/null 2> "$tmp/chat-notemplate.err"
rc=$?
check "chat without a template in the model exits 2 naming the formats" \
    eval '[ $rc -eq 2 ] && grep -q chatml "$tmp/chat-notemplate.err"'

# ---- game_loop: no frame over the budget; cut and smaller chunks change no token
# Under an emulator (TEST_RUNNER) time means nothing for the target (code is translated as it
# first runs): the loop's logic is checked with budgets it can meet, back to back.
game_budget= tight="--llm-ms 0.2"
[ -n "$run" ] && game_budget="--frame-ms 5000 --llm-ms 2000 --no-vsync" tight="--frame-ms 100 --llm-ms 20"
$run "$bin/game_loop" "$model" $game_budget > "$tmp/game.out"
check "game_loop exits 0 (no frame over its budget)" [ $? -eq 0 ]
check "game_loop's worst frame is within the budget it prints" \
    awk '/^frame time:/ { ok = ($4 + 0 <= $10 + 0 && $10 + 0 > 0) } END { exit !ok }' "$tmp/game.out"
# back to back (--no-vsync) and with calls cut: the text must not change. Its frame times are
# not checked: frames that run back to back are the ones a busy machine preempts.
$run "$bin/game_loop" "$model" $tight --no-vsync > "$tmp/game-tight.out"
rc=$?
check "game_loop with a tight model slice ($tight) runs to the end" eval '[ $rc -eq 0 -o $rc -eq 3 ]'
sed '/^frames /,$d' "$tmp/game.out" > "$tmp/game.npc"
sed '/^frames /,$d' "$tmp/game-tight.out" > "$tmp/game-tight.npc"
check "game_loop says the same line with a tighter slice" cmp -s "$tmp/game.npc" "$tmp/game-tight.npc"
check "game_loop's NPC says something" [ "$(wc -c < "$tmp/game.npc")" -gt 300 ]

# ---- voice_stream: whole sentences to the TTS; a barge-in stops it at once
$run "$bin/voice_stream" "$model" -n 100 > "$tmp/voice.out"
check "voice_stream exits 0" [ $? -eq 0 ]
check "voice_stream completes its answer" grep -q '^\[answer complete: 100 tokens' "$tmp/voice.out"
check "voice_stream reports its inter-token p99" grep -q '^\[latency: first token [0-9.]* ms; between tokens p50 [0-9.]* ms, p99 [0-9.]* ms' "$tmp/voice.out"
sed -n 's/^\[tts *[0-9.]* ms\] //p' "$tmp/voice.out" > "$tmp/voice.sentences"
check "voice_stream speaks sentences that end at punctuation (all but the answer's last)" \
    awk '{ last = $0; if (prev != "" && prev !~ /[.!?]["'"'"')]?$/) bad++; prev = $0 } END { exit !(NR >= 3 && !bad) }' \
    "$tmp/voice.sentences"
$run "$bin/voice_stream" "$model" -n 100 --barge-in-tokens 30 > "$tmp/barge.out"
check "voice_stream exits 0 after a barge-in" [ $? -eq 0 ]
check "voice_stream stops right after the barge-in" grep -q '^\[barge-in after .* later: 30 tokens,' "$tmp/barge.out"
sed -n 's/^\[tts *[0-9.]* ms\] //p' "$tmp/barge.out" > "$tmp/barge.sentences"
check "voice_stream spoke only whole sentences before the barge-in" \
    sh -c '[ -s "$1" ] && head -n "$(wc -l < "$1")" "$2" | cmp -s - "$1"' sh "$tmp/barge.sentences" "$tmp/voice.sentences"
$run "$bin/voice_stream" "$model" -n 400 --barge-in-ms 0 > "$tmp/barge-timer.out"
rc=$?
check "voice_stream with a barge-in timer exits 0 and ends either way" \
    eval '[ $rc -eq 0 ] && grep -q -e "^\[barge-in" -e "^\[answer complete" "$tmp/barge-timer.out"'

# ---- llmmini-run --tools: a spoken command becomes one call valid against its tool's schema
# (stories260K knows no tools: the required-call grammar makes it one), printed after the reply
cli=$(dirname "$0")/../llmmini-run
$run "$cli" -m "$model" --tools examples/grammars/tools.json --tool-family qwen2_5 --tool-choice required \
    -p "Set a timer for ten minutes" --temp 1 --seed 4 -n 200 -t 1 > "$tmp/tools.out"
rc=$?
check "llmmini-run --tools --tool-choice required prints one complete call" \
    eval '[ $rc -eq 0 ] && [ "$(grep -c "^call: " "$tmp/tools.out")" -eq 1 ] && ! grep -q "(incomplete)" "$tmp/tools.out"'

# ---- assistant: the command (argument or stdin) becomes one line of JSON, a call to one of the
# tools whose arguments the grammar held to its schema (whatever stories260K picks)
call_re='^{"name": "(get_weather|set_timer)", "arguments": {.*}}$'
for family in qwen2_5 lfm2_5; do
    $run "$bin/assistant" "$model" examples/grammars/tools.json "Set a timer for ten minutes" --family $family \
        > "$tmp/assistant.$family" 2> "$tmp/assistant.$family.err"
    rc=$?
    check "assistant --family $family prints one call as JSON" \
        eval '[ $rc -eq 0 ] && [ "$(wc -l < "$tmp/assistant.$family")" -eq 1 ] && grep -Eq "$call_re" "$tmp/assistant.$family"'
done
echo "what is the weather in Paris" | $run "$bin/assistant" "$model" examples/grammars/tools.json --family lfm2_5 \
    --temp 1 --seed 3 > "$tmp/assistant.stdin" 2> /dev/null
rc=$?
check "assistant reads the command from stdin" eval '[ $rc -eq 0 ] && grep -Eq "$call_re" "$tmp/assistant.stdin"'
$run "$bin/assistant" "$model" examples/grammars/tools.json "Set a timer" --family qwen2_5 -n 3 \
    > "$tmp/assistant.short" 2> "$tmp/assistant.short.err"
rc=$?
check "assistant with too few tokens for a call exits 1 and prints nothing" \
    eval '[ $rc -eq 1 ] && [ ! -s "$tmp/assistant.short" ] && grep -q "no complete call" "$tmp/assistant.short.err"'
$run "$bin/assistant" "$model" examples/grammars/tools.json "Set a timer" > /dev/null 2> "$tmp/assistant.nofamily"
rc=$?
check "assistant on a model without a tool template asks for --family" \
    eval '[ $rc -eq 1 ] && grep -q -- "--family" "$tmp/assistant.nofamily"'

# ---- llmmini-bench --parallel on the hybrids: its runs start from forks of the prompt, since a
# sequence with recurrent state cannot be cut back to it
for arch in qwen35 lfm2; do
    $run "$bin/../llmmini-bench" -m "$shared/golden/arch/tiny-$arch.gguf" -t 1 -p 8 -n 4 -r 2 --parallel 3 \
        --no-bandwidth --json > "$tmp/bench.$arch" 2> "$tmp/bench.$arch.err"
    rc=$?
    check "llmmini-bench --parallel 3 on tiny-$arch exits 0 with its aggregate" \
        eval '[ $rc -eq 0 ] && grep -q "\"parallel\":3" "$tmp/bench.$arch" && grep -q "aggregate" "$tmp/bench.$arch.err"'
done

echo "test_examples: $failures failed"
[ "$failures" -eq 0 ]
